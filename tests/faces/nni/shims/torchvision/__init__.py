"""A stand-in for torchvision in the NNI face's user scripts: sklearn's digits served as MNIST.

slimkit's tests are offline and torchvision does not import beside slimkit's torch, so this package (put on
``PYTHONPATH`` only for the subprocesses of ``tests/faces/nni/test_user_scripts.py``) provides the handful of
names NNI users' MNIST scripts take from it: ``datasets.MNIST`` and ``transforms.Compose/ToTensor/Normalize``.
The images are the 1,797 real 8x8 handwritten digits, upscaled to 28x28; ``SHIM_TRAIN_SIZE`` /
``SHIM_TEST_SIZE`` cap the splits to keep the tests fast. This is our own code; no torchvision source is copied.
"""

from . import datasets, transforms

__all__ = ["datasets", "transforms"]
__version__ = "0.0-slimkit-test-shim"
