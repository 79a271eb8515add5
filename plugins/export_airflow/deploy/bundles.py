"""A DAG bundle holding one part of the dags folder, so several dag-processors share the parsing
(``airflow dag-processor --bundle-name dags-N``; ``make cluster DAG_PROCESSORS=2``).

The bundle's folder (under Airflow's bundle storage, ``[dag_processor]
dag_bundle_storage_path``) holds a symbolic link to each DAG file of its part
(export_lib/config/bundles.py says which); the DAG files resolve the link, so they read
``dags/config`` as if they were parsed from ``dags/``. The links are rewritten when the bundle
is initialised (dag-processor, worker) and at every refresh (every ``refresh_interval``), so a
company added to ``dags/`` appears in its bundle without a restart and a removed one leaves it.
Configured by ``AIRFLOW__DAG_PROCESSOR__DAG_BUNDLE_CONFIG_LIST`` (scripts/airflow-env.sh,
docker-compose.ha.yaml)::

    [{"name": "dags-1", "classpath": "export_airflow.deploy.bundles.DagsPartBundle",
      "kwargs": {"dags_folder": "/opt/airflow/dags", "part": 1, "parts": 2}}, ...]

``python -m export_airflow.deploy.bundles register`` writes the configured bundles' rows to
Airflow's metadata database once, before the dag-processors start (``make cluster``'s setup,
compose's ``airflow-init``): each dag-processor writes them as it starts, and two starting
together on a database without them race on the same row and one exits.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from export_airflow.airflow_compat import base_dag_bundle, register_dag_bundles
from export_lib.config.bundles import part_files


class DagsPartBundle(base_dag_bundle()):  # type: ignore[misc] - a class Airflow names

    """Part ``part`` of ``parts`` of the DAG files directly in ``dags_folder``."""

    supports_versioning = False

    def __init__(self, *, dags_folder: str, part: int, parts: int, **kwargs) -> None:
        super().__init__(**kwargs)
        self.dags_folder = Path(dags_folder)
        self.part, self.parts = int(part), int(parts)
        if not 1 <= self.part <= self.parts:
            raise ValueError(f"DAG bundle {self.name}: part={part} is not one of 1..{parts}; "
                             "fix its kwargs in [dag_processor] dag_bundle_config_list")

    @property
    def path(self) -> Path:
        return self.base_dir / "files"

    def get_current_version(self) -> None:
        return None

    def initialize(self) -> None:
        self.sync()
        super().initialize()

    def refresh(self) -> None:
        self.sync()

    def sync(self) -> None:
        """Make the folder hold exactly a link to each DAG file of the part. Safe to run in
        several processes at once (a dag-processor and a worker on one machine): each link is
        made under a private name and renamed over the old one."""
        if not self.dags_folder.is_dir():
            raise FileNotFoundError(f"DAG bundle {self.name}: dags_folder {self.dags_folder} is "
                                    "not a directory; fix its kwargs in [dag_processor] "
                                    "dag_bundle_config_list")
        folder = self.path
        folder.mkdir(parents=True, exist_ok=True)
        wanted = {f.name: f.resolve() for f in part_files(self.dags_folder, self.part,
                                                          self.parts)}
        for name, target in wanted.items():
            link = folder / name
            if link.is_symlink() and Path(os.readlink(link)) == target:
                continue
            tmp = folder / f".{name}.{os.getpid()}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(target)
            tmp.replace(link)
        for stale in folder.glob("*.py"):
            if stale.name not in wanted:
                stale.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["register"]:
        print("usage: python -m export_airflow.deploy.bundles register", file=sys.stderr)
        return 2
    print(f"DAG bundles registered: {', '.join(register_dag_bundles())}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
