"""Post-training int8 of the digits CNN with the native (PyTorch FX) backend: per-channel weights, uint8 inputs."""

global_qconfig = dict(
    w_observer=dict(type='mmrazor.PerChannelMinMaxObserver'),
    a_observer=dict(type='mmrazor.MovingAverageMinMaxObserver'),
    w_fake_quant=dict(type='mmrazor.FakeQuantize'),
    a_fake_quant=dict(type='mmrazor.FakeQuantize'),
    w_qscheme=dict(qdtype='qint8', bit=8, is_symmetry=True, is_symmetric_range=True),
    a_qscheme=dict(qdtype='quint8', bit=8, is_symmetry=True, averaging_constant=0.1))

model = dict(
    _scope_='mmrazor',
    type='MMArchitectureQuant',
    architecture=dict(type='ZooModel', name='digits_cnn', pretrained=False),
    quantizer=dict(
        type='mmrazor.NativeQuantizer',
        global_qconfig=global_qconfig,
        tracer=dict(type='mmrazor.CustomTracer')))

test_cfg = dict(type='mmrazor.PTQLoop', calibrate_dataloader=dict(batch_size=32), calibrate_steps=4)
