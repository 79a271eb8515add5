"""What each stage returns: frozen models with named fields.

The Airflow operators push a result's :meth:`~ResultModel.as_xcom` (``model_dump(mode="json")``)
to XCom and read the previous stage's back with ``from_xcom``; ``exportctl`` reads the
attributes. The JSON of every result is the dict the stage returned before it was typed, key
for key, so a DAG run that started before an upgrade reads its XComs after it.

Render has three outcomes, one model each (:data:`RenderResult`): :class:`Rendered` (a new
attempt staged its object, publish validates and promotes it), :class:`AlreadyPublished` (the
run had its artifact; nothing was rendered) and :class:`RenderSkipped` (an empty window under
``skip_empty``; nothing is published).

Reading a result like the dict it used to be — ``result["rows"]``, ``result.get("attempt_id")``,
``result == {...}`` — reads its XCom JSON. That keeps callers written against the dicts
(tests, scripts) working; code in export_lib, the operators and the CLI reads attributes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from export_lib.errors import ExportError


def _problems(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or '(value)'}: {e['msg']}"
                     for e in exc.errors())


class ResultModel(BaseModel):
    """A frozen result with named fields whose XCom form is its JSON dump."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def as_xcom(self) -> dict[str, Any]:
        """Plain JSON types, what the operator returns to XCom."""
        return self.model_dump(mode="json")

    @classmethod
    def from_xcom(cls, value: Any) -> Self:
        """The result back from its XCom form (an instance is returned as it is); anything
        else is an ExportError naming the fields that do not fit."""
        if isinstance(value, cls):
            return value
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            raise ExportError(f"the {cls.__name__} handed between tasks is not readable "
                              f"({_problems(exc)}); clear the task that produced it") from exc

    # Read access as the dict it used to be (see the module docstring).
    def __getitem__(self, key: str) -> Any:
        return self.as_xcom()[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.as_xcom().get(key, default)

    def __contains__(self, key: object) -> bool:
        return key in self.as_xcom()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Mapping):
            return self.as_xcom() == dict(other)
        return super().__eq__(other)


class Rendered(ResultModel):
    """Render staged a new object: attempt ``attempt_id`` (generation ``generation``) wrote
    ``rows`` rows, ``bytes`` bytes with ``sha256``; publish validates exactly that."""

    run_key: str
    rendered: Literal[True] = True
    attempt_id: str
    generation: int
    rows: int
    bytes: int
    sha256: str
    columns: tuple[str, ...]


class AlreadyPublished(ResultModel):
    """The run already had artifact ``artifact_version``; nothing was rendered (publish reports
    that artifact)."""

    run_key: str
    rendered: Literal[False] = False
    artifact_version: int
    sha256: str
    rows: int


class RenderSkipped(ResultModel):
    """The window held no rows and the export sets ``skip_empty``: the run is skipped with
    ``skipped`` as its reason; nothing is published."""

    run_key: str
    rendered: Literal[False] = False
    skipped: str
    rows: Literal[0] = 0


RenderResult = Rendered | AlreadyPublished | RenderSkipped
_RENDER_RESULT: TypeAdapter[RenderResult] = TypeAdapter(RenderResult)


def render_result_from_xcom(value: Any) -> RenderResult:
    """A render result back from its XCom form (the three shapes are told apart by their
    fields; ``extra="forbid"`` keeps them from matching each other)."""
    if isinstance(value, (Rendered, AlreadyPublished, RenderSkipped)):
        return value
    try:
        return _RENDER_RESULT.validate_python(value)
    except ValidationError as exc:
        raise ExportError(f"the render result handed between tasks is not readable "
                          f"({_problems(exc)}); clear the render task to rebuild it") from exc


class PublishResult(ResultModel):
    """The run's artifact after publish: version ``version`` at ``uri``; ``created`` is False
    when nothing new was published (the content was unchanged, or render found the run ready,
    or the attempt had published already)."""

    run_key: str
    created: bool
    version: int
    uri: str
    sha256: str
    rows: int
    bytes: int


class DeliverResult(ResultModel):
    """One destination's delivery of the run's newest artifact, as recorded in the ledger
    after this call (:class:`export_lib.delivery.DeliveryOutcome` plus the run and the
    destination asked for)."""

    run_key: str
    destination: str
    delivery_id: str
    destination_id: str
    destination_type: str
    target: str
    state: str
    attempts: int
    receipt: str | None
    already_delivered: bool = False
    already_present: bool = False


class StagingObject(ResultModel):
    """A staging object of an abandoned or failed attempt (``exportctl ledger gc``)."""

    attempt_id: str
    run_key: str
    uri: str


class KeptStagingObject(StagingObject):
    """A staging object the store could not delete; it stays recorded as garbage."""

    error: str


class HeldStagingObject(StagingObject):
    """A staging object a hold keeps (``reason``: legal_hold, an operator's hold on its run, a
    config that cannot be read); it stays recorded as garbage."""

    reason: str


class StagingCleanup(ResultModel):
    """What :func:`~export_lib.pipeline.retention.collect_staging_garbage` did."""

    cleaned: tuple[StagingObject, ...] = ()
    kept: tuple[KeptStagingObject, ...] = ()
    held: tuple[HeldStagingObject, ...] = ()


class ArtifactLine(ResultModel):
    """The artifact ``exportctl run`` reports."""

    uri: str
    version: int
    sha256: str
    rows: int


class DeliveryLine(ResultModel):
    """One destination's state as ``exportctl run`` reports it."""

    destination: str
    state: str


class RunOutcome(ResultModel):
    """What ``exportctl run`` (``cli.commands.run_one``: start, render, publish, deliver) did
    with one slot; ``--json`` prints :meth:`as_xcom`, with ``skipped`` only when it was and
    ``warnings`` only when there are some (a schema change published under ``warn`` or
    ``new_major``, ADR 0025)."""

    run_key: str
    state: str
    window_start_utc: str
    window_end_utc: str
    skipped: str | None = None
    artifact: ArtifactLine | None = None
    deliveries: tuple[DeliveryLine, ...] = ()
    warnings: tuple[str, ...] = ()

    def as_xcom(self) -> dict[str, Any]:
        left_out = {name for name, empty in (("skipped", self.skipped is None),
                                             ("warnings", not self.warnings)) if empty}
        return self.model_dump(mode="json", exclude=left_out or None)


__all__ = [
    "AlreadyPublished", "ArtifactLine", "DeliverResult", "DeliveryLine", "KeptStagingObject",
    "PublishResult", "RenderResult", "RenderSkipped", "Rendered", "ResultModel", "RunOutcome",
    "StagingCleanup", "StagingObject", "render_result_from_xcom",
]
