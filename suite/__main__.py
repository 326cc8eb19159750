"""``python -m suite`` is the ``mpcbench`` command."""

import sys

from .cli import main

sys.exit(main())
