"""Factor transfer, stage 2: the student's translator matches the pretrained paraphraser's factors.

Built on stage 1's config: the student trains again, the paraphraser switches to ``phase='train'`` (it only
encodes), the mappings are replaced (``_delete_=True``; stage 1's reconstruction loss stays defined but
unmapped, so it is not computed) and ``init_cfg`` loads stage 1's weights. The checkpoint named here is a URL,
which slimkit does not fetch: point ``init_cfg.checkpoint`` at the ``.safetensors`` file stage 1 saved.
"""

_base_ = ['./ft_paraphraser_pretrain.py']

model = dict(
    calculate_student_loss=True,
    student_trainable=True,
    distiller=dict(
        connectors=dict(paraphrase=dict(phase='train')),
        distill_losses=dict(loss_factor=dict(type='FTLoss', loss_weight=1.0)),
        loss_forward_mappings=dict(
            _delete_=True,
            loss_factor=dict(
                s_feature=dict(from_student=True, recorder='last', connector='translate'),
                t_feature=dict(from_student=False, recorder='last', connector='paraphrase')))),
    init_cfg=dict(type='Pretrained', checkpoint='https://models.example.com/factor_transfer/stage1.pth'))

train_cfg = dict(max_epochs=40)
