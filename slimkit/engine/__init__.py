"""smash(), SmashedModel and the save format."""

from slimkit.engine.smash import check_config, smash
from slimkit.engine.smashed_model import SmashedModel
from slimkit.engine.stream import StreamResult, smash_folder

__all__ = ["SmashedModel", "StreamResult", "check_config", "smash", "smash_folder"]
