"""LSQ quantization-aware training of the digits CNN (academic backend): learned 8-bit steps, then int8."""

_base_ = './ptq_native_digits.py'

global_qconfig = dict(
    w_observer=dict(type='mmrazor.LSQPerChannelObserver'),
    a_observer=dict(type='mmrazor.LSQObserver'),
    w_fake_quant=dict(type='mmrazor.LearnableFakeQuantize'),
    a_fake_quant=dict(type='mmrazor.LearnableFakeQuantize'),
    w_qscheme=dict(qdtype='qint8', bit=8, is_symmetry=True, is_symmetric_range=True),
    a_qscheme=dict(qdtype='quint8', bit=8, is_symmetry=True))

model = dict(quantizer=dict(_delete_=True, type='mmrazor.AcademicQuantizer', global_qconfig=global_qconfig))

optim_wrapper = dict(optimizer=dict(type='SGD', lr=1e-3, momentum=0.9, weight_decay=1e-4))
train_cfg = dict(_delete_=True, type='mmrazor.LSQEpochBasedLoop', max_epochs=2, val_interval=1)
