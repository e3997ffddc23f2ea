"""``python -m slimkit.compression experiment.json [--automatic]``: Auptimizer's command, run by ``slimkit run``.

The compression engines are a low layer; this entry point only hands the command line to the top-level
``slimkit`` program (``python -m slimkit run ...``) and imports nothing from the layers above.
"""

import runpy
import sys

if __name__ == "__main__":
    sys.argv = ["slimkit", "run", *sys.argv[1:]]
    runpy.run_module("slimkit", run_name="__main__", alter_sys=True)
