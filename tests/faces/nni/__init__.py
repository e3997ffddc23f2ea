"""NNI 2.x users' code on slimkit: pruners, quantizers, speedup and the quick starts, on real digits."""
