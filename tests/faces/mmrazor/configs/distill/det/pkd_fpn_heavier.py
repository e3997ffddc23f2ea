"""The PKD config with the weight of every level raised: the child dicts merge into the inherited losses."""

_base_ = ['./pkd_fpn_levels.py']

model = dict(
    architecture=dict(cfg_path='mmdet::retinanet/retinanet_r50_fpn_2x_coco.py'),
    teacher=dict(cfg_path='mmdet::retinanet/retinanet_x101-64x4d_fpn_1x_coco.py'),
    distiller=dict(distill_losses={f'loss_pkd_p{i}': dict(loss_weight=12) for i in range(4)}))

optim_wrapper = dict(optimizer=dict(lr=0.01))
