"""The engines every face and smash algorithm builds on: the machinery, named by no peer.

:mod:`.pruning` (pruners, maskers, the dependency-aware coupling, SparseGPT, Wanda), :mod:`.quantization`
(quantizers, int8/, lowbit/ and its C kernel), :mod:`.speedup` (the graph and ``ModelSpeedup``), :mod:`.onnx`,
:mod:`.gguf`, :mod:`.caching`, :mod:`.batching`, :mod:`.nas` and :mod:`.token_merging`. No engine imports a face;
the peers' import paths (``slimkit.compression``, ``slimkit.razor``) are re-exports in the faces' layer.
"""
