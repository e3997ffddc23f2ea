"""smash(), SmashedModel and the save format."""

from slimkit.engine.smash import check_config, smash
from slimkit.engine.smashed_model import SmashedModel

__all__ = ["SmashedModel", "check_config", "smash"]
