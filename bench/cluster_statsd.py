"""A UDP listener for Airflow's StatsD metrics, for ``bench/cluster.py``."""

from __future__ import annotations

import socket
import threading
import time

from bench.cluster_figures import statsd_samples


class StatsdListener:
    """Airflow's StatsD metrics (``[metrics] statsd_on``) received on a local UDP port: the
    scheduler's ``scheduler_loop_duration`` and the dag-processor's ``total_parse_time``, each
    with the monotonic time it arrived."""

    WANTED = ("scheduler.scheduler_loop_duration", "dag_processing.total_parse_time")

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.settimeout(0.5)
        self.port = self.sock.getsockname()[1]
        self.samples: list[tuple[float, str, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(65535).decode(errors="replace")
            except TimeoutError:
                continue
            now = time.monotonic()
            self.samples.extend((now, n, v) for n, v in statsd_samples(data) if n in self.WANTED)

    def values(self, name: str, since: float = 0.0, until: float = float("inf")) -> list[float]:
        return [v for t, n, v in list(self.samples) if n == name and since <= t <= until]

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)
        self.sock.close()
