"""The DetNAS subnet a search chose (one block per searchable position, from the YAML file beside this config),
exported from the supernet as a plain detector; the pretrained subnet named by ``init_cfg`` is not fetched."""

_base_ = ['./detnas_retina_shufflenet_tiny_supernet.py']

model = dict(
    _scope_='mmrazor',
    type='sub_model',
    cfg=_base_.supernet,
    fix_subnet='{{fileDirname}}/detnas_retina_shufflenet_tiny_subnet.yaml',
    init_cfg=dict(type='Pretrained', checkpoint='https://weights.example.invalid/detnas_retina_tiny_subnet.pth',
                  prefix='architecture.'))

find_unused_parameters = False
