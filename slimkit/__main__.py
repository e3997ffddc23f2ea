"""`python -m slimkit` runs the command line."""

import sys

from slimkit.cli import main

sys.exit(main())
