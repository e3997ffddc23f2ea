"""The subnet a search chose, fixed from a YAML file and exported as a plain model (``sub_model``).

The whole ``model`` of the supernet config is replaced by assigning ``_base_.model``; ``{{fileDirname}}`` is
this file's folder, so the subnet file is found wherever the tests run. The pretrained weights named by
``init_cfg`` are a URL, which slimkit does not fetch (the subnet keeps the supernet's weights).
"""

_base_ = ['./spos_shufflenet_supernet_tiny.py']

_base_.model = dict(
    _scope_='mmrazor',
    type='sub_model',
    cfg=_base_.supernet,
    fix_subnet='{{fileDirname}}/spos_shufflenet_subnet_tiny.yaml',
    init_cfg=dict(type='Pretrained', checkpoint='https://models.example.com/spos/shufflenet_tiny_subnet.pth',
                  prefix='architecture.'))

model_wrapper_cfg = None
