"""The pair most classification configs distil: an MMCls ResNet-18 student learning from a ResNet-34.

The configs built on this file add their distiller (and may name other models); their ``model`` dicts merge
into this one. The ``cfg_path`` entries name MMCls's files, which slimkit does not read: pass your own models
with ``build(cfg.model, architecture=..., teacher=...)``.
"""

_base_ = './preprocessors.py'

model = dict(
    _scope_='mmrazor',
    type='SingleTeacherDistill',
    data_preprocessor=_base_.bgr_input_norm,
    architecture=dict(cfg_path='mmcls::resnet/resnet18_8xb32_in1k.py', pretrained=False),
    teacher=dict(cfg_path='mmcls::resnet/resnet34_8xb32_in1k.py', pretrained=False))
