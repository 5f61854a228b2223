"""``python -m createos_sync``: the ``createos-sync`` command line."""

import sys

from .cli import main

sys.exit(main())
