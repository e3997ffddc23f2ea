"""``nni.compression.base`` (NNI 3.0) as ``slimkit.compression.base``: its ``compressor`` module's ``Quantizer``."""
