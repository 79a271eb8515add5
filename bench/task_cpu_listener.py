"""An Airflow plugin bench/cluster.py copies into its cluster's plugins folder: after each
successful task try, the task process appends its own CPU (user + system) and peak RSS since
its fork (``getrusage``: parse, execute and this listener; not the supervisor's share) to the
JSON-lines file ``BENCH_TASK_CPU_FILE``. Export and no-op floor tasks are measured the same way
(the bar is each export task's CPU against a no-op task's)."""

from __future__ import annotations

import json
import os
import resource

from airflow.listeners import hookimpl
from airflow.plugins_manager import AirflowPlugin


class TaskCpuListener:
    @hookimpl
    def on_task_instance_success(self, previous_state, task_instance) -> None:
        path = os.environ.get("BENCH_TASK_CPU_FILE")
        if not path:
            return
        usage = resource.getrusage(resource.RUSAGE_SELF)
        record = {"dag_id": task_instance.dag_id, "run_id": task_instance.run_id,
                  "task_id": task_instance.task_id,
                  "map_index": getattr(task_instance, "map_index", -1),
                  "cpu_s": round(usage.ru_utime + usage.ru_stime, 4),
                  "maxrss_mb": round(usage.ru_maxrss / 1024, 1)}
        with open(path, "a", encoding="utf-8") as out:  # one short line: appends do not tear
            out.write(json.dumps(record) + "\n")


class BenchTaskCpuPlugin(AirflowPlugin):
    name = "bench_task_cpu"
    listeners = [TaskCpuListener()]
