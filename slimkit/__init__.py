"""slimkit: make PyTorch models smaller and faster — offline, on a CPU, with honest measurements."""

from slimkit import compression  # NNI's and Auptimizer's import path (``aup.compression.create_compressor``)
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
