"""slimkit: make PyTorch models smaller and faster — offline, on a CPU, with honest measurements.

The public names load on first use (PEP 562): ``import slimkit`` imports no torch and no optional library, so
``python -m slimkit --help`` and every CLI call start fast; ``from slimkit import SmashConfig, smash`` imports what
those names need, and ``slimkit.compression`` (NNI's and Auptimizer's import path) loads when first touched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from slimkit.core.lazy import lazy_exports

if TYPE_CHECKING:  # what the lazy names resolve to, for type checkers and readers
    from slimkit import compression
    from slimkit.config import SmashConfig, SmashConfigPrefixWrapper
    from slimkit.engine import SmashedModel, smash, smash_folder
    from slimkit.faces.auptimizer import BasicConfig, aup_args, aup_save_model, create_compressor, print_result
    from slimkit.faces.nni import trace
    from slimkit.faces.pruna import PrunaDataModule, PrunaModel

__version__ = "0.1.0"

__all__ = [
    "BasicConfig",
    "PrunaDataModule",
    "PrunaModel",
    "SmashConfig",
    "SmashConfigPrefixWrapper",
    "SmashedModel",
    "__version__",
    "aup_args",
    "aup_save_model",
    "compression",
    "create_compressor",
    "print_result",
    "smash",
    "smash_folder",
    "trace",
]

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("BasicConfig", "aup_args", "aup_save_model", "create_compressor", "print_result"),
                    "slimkit.faces.auptimizer"),
    **dict.fromkeys(("PrunaDataModule", "PrunaModel"), "slimkit.faces.pruna"),
    **dict.fromkeys(("SmashConfig", "SmashConfigPrefixWrapper"), "slimkit.config"),
    **dict.fromkeys(("SmashedModel", "smash", "smash_folder"), "slimkit.engine"),
    "compression": "slimkit.compression",
    "trace": "slimkit.faces.nni",
})
