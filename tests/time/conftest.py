"""Time tests: Airflow (timetable tests only) needs AIRFLOW_HOME before it is imported.

No global Airflow setup exists yet, so a throwaway home is set here (never the repo, no DB).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

os.environ.setdefault("AIRFLOW_HOME", tempfile.mkdtemp(prefix="airflow-home-time-"))
os.environ.setdefault("AIRFLOW__CORE__LOAD_EXAMPLES", "False")
# Registers ExportTimetable (export_plugin.py) so Airflow's serializer accepts it.
os.environ.setdefault("AIRFLOW__CORE__PLUGINS_FOLDER",
                      str(Path(__file__).resolve().parents[2] / "plugins"))
