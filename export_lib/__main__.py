"""``python -m export_lib`` = ``exportctl``."""

import sys

from export_lib.cli.main import main

sys.exit(main())
