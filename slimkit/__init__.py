"""slimkit: make PyTorch models smaller and faster — offline, on a CPU, with honest measurements."""

from slimkit.config import SmashConfig, SmashConfigPrefixWrapper
from slimkit.engine import SmashedModel, smash, smash_folder
from slimkit.experiment import BasicConfig, aup_args, create_compressor, print_result

__version__ = "0.1.0"

__all__ = [
    "BasicConfig",
    "SmashConfig",
    "SmashConfigPrefixWrapper",
    "SmashedModel",
    "__version__",
    "aup_args",
    "create_compressor",
    "print_result",
    "smash",
    "smash_folder",
]
