"""A MobileNetV2 subnet fixed from a file named relative to the folder you run from (here ``configs/``).

``fix_subnet`` is read as written, from the working directory, as MMRazor's own tools read it from the
root of their repository: run from ``tests/faces/mmrazor/configs`` or pass ``fix_subnet=`` yourself.
"""

_base_ = ['./spos_mobilenet_supernet_tiny.py']

model = dict(
    _scope_='mmrazor',
    _delete_=True,
    type='sub_model',
    cfg=_base_.supernet,
    fix_subnet='nas/spos_mobilenet_subnet_tiny.yaml')
