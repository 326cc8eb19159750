"""``python -m suite`` is the ``mpcbench`` command."""

import sys

from .bench.cli import main

sys.exit(main())
