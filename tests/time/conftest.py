"""Time tests: Airflow (timetable tests only) needs AIRFLOW_HOME before it is imported.

No global Airflow setup exists yet, so a throwaway home is set here (never the repo, no DB).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from pathlib import Path

if "AIRFLOW_HOME" not in os.environ:  # tests/conftest.py sets (and removes) one normally
    _home = tempfile.mkdtemp(prefix="airflow-home-time-")
    atexit.register(shutil.rmtree, _home, ignore_errors=True)
    os.environ["AIRFLOW_HOME"] = _home
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Registers ExportTimetable (export_plugin.py) so Airflow's serializer accepts it.
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER",
                      str(Path(__file__).resolve().parents[2] / "plugins"))
