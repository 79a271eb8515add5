"""An executor that accepts every task and runs none (bench/ha.py): the scheduler's own work
at a burst, without task processes competing for the cores. Its tasks stay queued."""

from __future__ import annotations

from airflow.executors.base_executor import BaseExecutor


class NullExecutor(BaseExecutor):
    def _process_workloads(self, workload_items) -> None:
        """Accepted, never run."""

    def end(self) -> None:
        """Nothing runs, so nothing to wait for at shutdown."""

    def terminate(self) -> None:
        """Nothing runs, so nothing to stop."""
