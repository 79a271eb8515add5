"""One export, stage by stage: start → render → publish → deliver.

The Airflow operators call one stage each and ``exportctl run`` calls them in a row, so both
worlds run the same code with the same policies (see ``start.start_run``).
"""

from export_lib.pipeline.requeue import Requeued, operator_actions, requeue_deliveries
from export_lib.pipeline.results import (
    AlreadyPublished,
    ArtifactLine,
    DeliverResult,
    DeliveryLine,
    PublishResult,
    Rendered,
    RenderResult,
    RenderSkipped,
    RunOutcome,
    StagingCleanup,
    render_result_from_xcom,
)
from export_lib.pipeline.retention import collect_staging_garbage
from export_lib.pipeline.stages import (
    RunContext,
    captured_destinations,
    deliver_run,
    list_deliveries,
    publish_run,
    render_run,
    schedule_of,
    watermark_ready,
)
from export_lib.pipeline.start import (
    register_run,
    slot_at_or_before,
    slot_log_context,
    start_manual,
    start_run,
)
from export_lib.pipeline.summary import RunSummary

__all__ = [
    "AlreadyPublished", "ArtifactLine", "DeliverResult", "DeliveryLine", "PublishResult",
    "RenderResult", "RenderSkipped", "Rendered", "Requeued", "RunContext", "RunOutcome",
    "RunSummary", "StagingCleanup",
    "render_result_from_xcom", "captured_destinations",
    "collect_staging_garbage", "deliver_run", "list_deliveries", "operator_actions",
    "publish_run", "register_run", "render_run", "requeue_deliveries", "schedule_of",
    "slot_at_or_before", "slot_log_context", "start_manual", "start_run", "watermark_ready",
]
