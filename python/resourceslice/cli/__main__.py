"""``python -m resourceslice.cli``: the ``resourceslice`` command."""

import sys

from resourceslice.cli.command import main

sys.exit(main())
