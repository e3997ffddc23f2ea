"""Supernets and the algorithms that train them: SPOS and the SearchableCNN search space."""

from slimkit.faces.mmrazor.nas.supernet.searchable_cnn import SearchableCNN
from slimkit.faces.mmrazor.nas.supernet.spos import SPOS

__all__ = ["SPOS", "SearchableCNN"]
