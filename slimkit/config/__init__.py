"""SmashConfig, its prefix wrapper and hyperparameter helpers."""

from slimkit.config.smash_config import SCHEMA_VERSION, SmashConfig, SmashConfigPrefixWrapper

__all__ = ["SCHEMA_VERSION", "SmashConfig", "SmashConfigPrefixWrapper"]
