"""``python3 -m shardx.importer``: see ``cli.py``."""

import sys

from .cli import main

sys.exit(main())
