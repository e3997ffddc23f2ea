"""``python -m slimkit.compression experiment.json [--automatic]``: Auptimizer's command, the same as ``slimkit run``.

An entry point is a face whatever folder it sits in (``tests/test_architecture.py`` places this module in the
top layer by name): it hands the command line to the CLI and is never imported by the compression engines.
"""

import sys

from slimkit.cli import main

if __name__ == "__main__":
    sys.exit(main(["run", *sys.argv[1:]]))
