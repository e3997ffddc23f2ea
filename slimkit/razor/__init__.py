"""``slimkit.razor``: MMRazor's face under the name users import it by; it lives in :mod:`slimkit.faces.mmrazor`."""

from slimkit.faces.mmrazor import *  # noqa: F403
from slimkit.faces.mmrazor import __all__  # noqa: F401
