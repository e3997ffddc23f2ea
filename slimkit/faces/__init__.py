"""The peers' faces, one package each, over the shared engines.

Each face speaks one peer's language (class names, signatures, config keys, file formats) as a view of the one
registry and the shared engines below it; no face holds a second implementation of an algorithm, and no engine
imports a face. The historical import paths users rely on (``slimkit.compression``, ``slimkit.razor``, ...) stay
importable as re-exports.
"""
