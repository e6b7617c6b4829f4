"""``python -m kerneltune``: the same command line as ``kerneltune``."""

import sys

from .cli import main

sys.exit(main())
