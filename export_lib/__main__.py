"""``python -m export_lib`` = ``exportctl``."""

import sys

from export_lib.cli import main

sys.exit(main())
