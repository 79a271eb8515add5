"""One export, stage by stage: start → render → publish → deliver.

The Airflow operators call one stage each and ``exportctl run`` calls them in a row, so both
worlds run the same code with the same policies (see ``start.start_run``).
"""

from export_lib.pipeline.requeue import Requeued, operator_actions, requeue_deliveries
from export_lib.pipeline.stages import (
    RunContext,
    captured_destinations,
    collect_staging_garbage,
    deliver_run,
    list_deliveries,
    publish_run,
    render_run,
    schedule_of,
    watermark_ready,
)
from export_lib.pipeline.start import register_run, slot_at_or_before, start_manual, start_run
from export_lib.pipeline.summary import RunSummary

__all__ = [
    "Requeued", "RunContext", "RunSummary", "captured_destinations",
    "collect_staging_garbage", "deliver_run", "list_deliveries", "operator_actions",
    "publish_run", "register_run", "render_run", "requeue_deliveries", "schedule_of",
    "slot_at_or_before", "start_manual", "start_run", "watermark_ready",
]
