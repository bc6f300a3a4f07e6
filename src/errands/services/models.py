"""Typed read models: what the service layer answers, for pages, the JSON API and the CLI alike.

Each is a dataclass whose fields are the keys of its JSON form, in order, so a page and its API twin
render and serialise the same object, and the OpenAPI document of the dashboard is generated from
these same classes (:meth:`ReadModel.json_schema`): the description cannot drift from the answers.
They also read as mappings (``model["field"]``), as the dicts they replace did, for templates,
metrics and diagnostics.
"""

from __future__ import annotations

import dataclasses
import functools
import types
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar, Union, get_args, get_origin, get_type_hints  # noqa: UP035


class ReadModel:
    """Base of every read model (each subclass is a dataclass)."""

    schema_description: ClassVar[str] = ""
    schema_name: ClassVar[str] = ""
    """The model's name in the OpenAPI document when it differs from the class's: a class renamed
    in the code keeps the schema name clients were generated from (set on the class itself; a
    subclass does not inherit it)."""

    def to_json(self) -> dict[str, Any]:
        """The model as JSON-ready data: nested models become objects, tuples lists."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}  # type: ignore[arg-type]

    def __eq__(self, other: object) -> bool:
        """Equal to the same model with the same values, and to its JSON form (as the dicts these
        models replace compared)."""
        if isinstance(other, ReadModel):
            return type(self) is type(other) and self.to_json() == other.to_json()
        if isinstance(other, dict):
            return self.to_json() == other
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable, as the dicts were

    @classmethod
    @functools.cache
    def _names(cls) -> frozenset[str]:
        """The field names, looked up once per class (templates read fields by key, row by row)."""
        return frozenset(f.name for f in dataclasses.fields(cls))  # type: ignore[arg-type]

    def keys(self) -> list[str]:
        return [f.name for f in dataclasses.fields(self)]  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        if key not in self._names():
            raise KeyError(key)
        return getattr(self, key)

    def __iter__(self) -> Iterator[str]:
        return iter(self.keys())

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._names() else default

    @classmethod
    def json_schema(cls, components: dict[str, Any]) -> dict[str, Any]:
        """A reference to this model's JSON schema, which is added (with every model it nests) to
        ``components`` (the OpenAPI document's ``components.schemas``)."""
        name = vars(cls).get("schema_name") or cls.__name__
        if name not in components:
            components[name] = {}  # a placeholder first: a model may nest itself
            hints = get_type_hints(cls)
            fields = dataclasses.fields(cls)  # type: ignore[arg-type]
            schema: dict[str, Any] = {"type": "object", "required": [f.name for f in fields],
                                      "properties": {f.name: type_schema(hints[f.name], components) for f in fields}}
            if cls.__doc__:
                schema["description"] = " ".join(cls.__doc__.split())
            components[name] = schema
        return {"$ref": f"#/components/schemas/{name}"}


def _plain(value: Any) -> Any:
    if isinstance(value, ReadModel):
        return value.to_json()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


_SCALARS: dict[Any, dict[str, Any]] = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
                                       bool: {"type": "boolean"}}


def type_schema(hint: Any, components: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema (OpenAPI 3.0 dialect) of a field's type hint."""
    origin = get_origin(hint)
    if origin in (Union, types.UnionType):
        options = [a for a in get_args(hint) if a is not type(None)]
        nullable = len(options) < len(get_args(hint))
        inner = type_schema(options[0], components) if len(options) == 1 else {
            "oneOf": [type_schema(a, components) for a in options]}
        if not nullable:
            return inner
        return {**inner, "nullable": True} if "$ref" not in inner else {"allOf": [inner], "nullable": True}
    if origin in (list, tuple):
        args = get_args(hint)
        return {"type": "array", "items": type_schema(args[0], components) if args else {}}
    if origin is dict:
        return {"type": "object", "additionalProperties": type_schema(get_args(hint)[1], components)}
    if isinstance(hint, type) and issubclass(hint, ReadModel):
        return hint.json_schema(components)
    return dict(_SCALARS.get(hint, {}))  # Any: whatever a job's arguments or result hold


# ----------------------------------------------------------------------------------- overview
@dataclass(eq=False)
class Throughput(ReadModel):
    """Jobs finished per bucket over a window (succeeded and failed)."""

    window: str
    bucket_seconds: int
    start: str
    succeeded: list[int]
    failed: list[int]
    total_succeeded: int
    total_failed: int


@dataclass(eq=False)
class QueueRow(ReadModel):
    """One queue's counts per state; ``capped`` marks the counts that are lower bounds."""

    name: str
    ready: int
    delayed: int
    blocked: int
    running: int
    stale: int
    failed: int
    capped: dict[str, bool]
    paused: bool
    oldest_ready_seconds: float | None


@dataclass(eq=False)
class QueueView(QueueRow):
    """A queue with the limits in force on its jobs and the registered jobs it serves."""

    limits: list[str] = field(default_factory=list)
    jobs: list[str] = field(default_factory=list)
    stored_limits: QueueLimitsView | None = None
    """The limits an operator set for the whole queue from the dashboard (None: none)."""


@dataclass(eq=False)
class ReadsView(ReadModel):
    """Where the dashboard's lists and figures are read from: the read replica, or the primary and why."""

    source: str
    """``replica`` or ``primary``."""
    state: str
    """``replica``, or why the primary: ``lagging``, ``unknown lag``, ``down``, ``not checked``,
    ``none`` (no replica configured), ``after a change`` (this session changed something moments ago)."""
    lag_seconds: float | None
    """The replica's lag when last looked at (None: unknown)."""
    max_lag_seconds: float | None
    """``read_max_lag``: beyond it, the reads go to the primary."""
    replica: str | None
    """The replica's URL, its password masked."""
    detail: str
    """Why the replica is down, as the database said it."""
    line: str
    """The same as one line: ``reads: replica, lag 0.2 s``."""


@dataclass(eq=False)
class Overview(ReadModel):
    """Counters per state and queue, throughput, workers."""

    now: str
    totals: dict[str, int]
    totals_capped: dict[str, bool]
    count_cap: int
    queues: list[QueueRow]
    workers_alive: int
    workers_stale: int
    no_worker: bool
    throughput: Throughput
    reads: ReadsView | None = None
    """Where these figures were read from (None: no read replica is configured)."""


@dataclass(eq=False)
class RegisteredWorker(ReadModel):
    """A worker process as its registry row says, and whether it still heart-beats, judged by its own lease."""

    id: str
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: str | None
    last_heartbeat_at: str | None
    seconds_since_heartbeat: float
    jobs_done: int
    alive: bool
    """Whether its last heartbeat is younger than ``alive_within``: after that, the jobs it holds are stale."""
    lease: float | None
    """Its own lease in seconds, as it registered it (None: an errands before schema 7 recorded none)."""
    heartbeat_every: float | None
    """Seconds between its heartbeats, as it registered them."""
    alive_within: float
    """Seconds after a heartbeat during which it counts as alive: its own lease (a row without one:
    twice the reader's lease)."""
    command: str | None = None
    """What an operator asked of it, read with its next heartbeat: "quiet" or "stop" (None: run)."""
    status: str | None = None
    """What it reported doing at its last heartbeat: "quiet", "stopping" (None: running)."""
    state: str = "running"
    """The two read together: "running", "quiet", "stopping", or a command not yet seen by the worker:
    "quiet requested", "resume requested", "stop requested"."""


@dataclass(eq=False)
class WorkerView(RegisteredWorker):
    """A worker with the ids of the jobs it holds now, and its database connections: those the
    server counts for its process (PostgreSQL; None where the server cannot tell) and the most it
    can hold (claim and settle, heartbeat, listener, and the shared pool's bound)."""

    current_jobs: list[Any] = field(default_factory=list)
    connections: int | None = None
    connection_bound: int = 0


# ----------------------------------------------------------------------------------- workflows
@dataclass(eq=False)
class WorkflowLink(ReadModel):
    """The batch, chain or workflow a job belongs to (its page is ``/workflows/{id}``)."""

    id: int
    kind: str
    name: str | None


@dataclass(eq=False)
class WorkflowStep(ReadModel):
    """One step of a workflow: its job, its label, where it stands, the steps it waits for, and
    its column in the graph (the longest path to it from a step that waits for nothing)."""

    id: int
    position: int
    label: str
    state: str
    parents: list[int]
    layer: int
    error: str | None


@dataclass(eq=False)
class WorkflowSummary(ReadModel):
    """A batch, chain or workflow and how far it got: "running", "blocked" (a dead or cancelled step
    holds the rest), "succeeded", "failed" or "cancelled".  In lists the state is read from the
    counters, and for those with failures from which steps are dead, cancelled or can still run."""

    id: int
    kind: str
    name: str | None
    policy: str | None
    state: str
    total: int
    done: int
    failed: int
    """Steps that ended in the dead letter (failed or expired)."""
    cancelled: int
    """Steps cancelled (by a cancel, or under ``policy="cancel"`` after a dead step)."""
    pending: int
    percent: float
    """Steps ended, succeeded or not, in percent of all."""
    progress: str
    """How far it got, in words: a percentage while it runs, else its state, with the steps counted."""
    created_at: str | None
    completed_at: str | None


@dataclass(eq=False)
class WorkflowView(WorkflowSummary):
    """A workflow with every step (in graph order: a step comes after the steps it waits for)."""

    steps: list[WorkflowStep] = field(default_factory=list)


@dataclass(eq=False)
class WorkflowList(ReadModel):
    """Batches, chains and workflows, newest first (a keyset page)."""

    workflows: list[WorkflowSummary]
    next_before_id: int | None


@dataclass(eq=False)
class WorkflowCancelled(ReadModel):
    """How many steps of the workflow were cancelled (those not started yet; running ones finish)."""

    workflow_id: int
    cancelled: int


# ----------------------------------------------------------------------------------- jobs
@dataclass(eq=False)
class JobSummary(ReadModel):
    """A waiting or running job as lists show it."""

    id: int
    name: str
    queue: str
    state: str
    attempts: int
    max_attempts: int
    priority: int
    created_at: str | None
    available_at: str | None
    arguments: Any
    last_error: str | None
    progress: float | None
    label: str | None = None


@dataclass(eq=False)
class ErrorEntry(ReadModel):
    """One failed attempt from a job's error history (``traceback`` only when kept and shown)."""

    attempt: int
    failed_at: str | None
    error_type: str
    error_message: str
    traceback: str | None = None


@dataclass(eq=False)
class LogEntry(ReadModel):
    """One ``logging`` record an attempt emitted: its time (the worker host's clock), level, logger
    and message; ``traceback`` only when the record carried one and the viewer may see tracebacks."""

    at: str | None
    level: str
    logger: str
    message: str
    traceback: str | None = None


@dataclass(eq=False)
class AttemptLogs(ReadModel):
    """The log records of one attempt (the latest, within the app's ``run_log_records`` and
    ``run_log_bytes``; ``dropped`` earlier ones were not kept)."""

    attempt: int
    worker: str | None
    logged_at: str | None
    """When the attempt's ending was written (the database's clock)."""
    dropped: int
    records: list[LogEntry] = field(default_factory=list)


@dataclass(eq=False)
class LiveJob(JobSummary):
    """A job still in the jobs table, with why it waits."""

    where: str = "jobs"
    owner: str | None = None
    reserved_at: str | None = None
    lease_until: str | None = None
    timeout: float | None = None
    unique_key: str | None = None
    expires_at: str | None = None
    """Not started by then, it never starts: it ends as expired (``expires_in``)."""
    deadline_at: str | None = None
    """No attempt starts after it (``deadline``)."""
    waits_for: list[int] = field(default_factory=list)
    """Ids of the jobs it still waits for (up to 20)."""
    batch_id: int | None = None
    concurrency_key: str | None = None
    rate_key: str | None = None
    """The rate-limit key its runs count under (None: the job's own window)."""
    progress_message: str | None = None
    cancel_requested: bool = False
    checkpoint: str | None = None
    """The JSON its handler last stored with ``current_job().checkpoint()``, cut to 500 characters
    (None: none): where its next attempt resumes."""
    resumptions: int = 0
    """How often a stopping worker gave it back from a checkpoint, its attempt refunded."""
    why: list[str] = field(default_factory=list)
    errors: list[ErrorEntry] = field(default_factory=list)
    """The error history, oldest first (at most 100 entries, the latest)."""
    tracebacks_hidden: bool = False
    """Tracebacks were kept but are not shown to this viewer (not an admin)."""
    workflow: WorkflowLink | None = None
    logs: list[AttemptLogs] = field(default_factory=list)
    """What each attempt logged, oldest attempt first (see AttemptLogs)."""


@dataclass(eq=False)
class DeadJob(ReadModel):
    """A job in the dead letter."""

    id: int
    name: str
    queue: str
    state: str
    where: str
    attempts: int
    max_attempts: int
    priority: int
    created_at: str | None
    failed_at: str | None
    arguments: Any
    error_type: str | None
    error_message: str | None
    why: list[str]
    label: str | None = None
    errors: list[ErrorEntry] = field(default_factory=list)
    tracebacks_hidden: bool = False
    workflow: WorkflowLink | None = None
    checkpoint: str | None = None
    """The last checkpoint (cut to 500 characters): a retry resumes from it."""
    logs: list[AttemptLogs] = field(default_factory=list)


@dataclass(eq=False)
class FinishedJob(ReadModel):
    """A job that ended with a kept result (succeeded or cancelled)."""

    id: int
    name: str
    queue: str
    state: str
    where: str
    attempts: int
    finished_at: str | None
    result: Any
    message: str | None
    batch_id: int | None
    why: list[str]
    label: str | None = None
    errors: list[ErrorEntry] = field(default_factory=list)
    tracebacks_hidden: bool = False
    workflow: WorkflowLink | None = None
    logs: list[AttemptLogs] = field(default_factory=list)


JobDetail = LiveJob | DeadJob | FinishedJob


@dataclass(eq=False)
class Searched(ReadModel):
    """What a text or name search looked at: ``window`` rows down (or up) to id ``edge_id``."""

    window: int
    edge_id: int | None
    complete: bool


@dataclass(eq=False)
class JobPage(ReadModel):
    """One keyset page of jobs (counts capped at 10,000)."""

    jobs: list[JobSummary]
    count: int
    sort: str
    count_capped: bool
    next_before_id: int | None
    next_after_id: int | None
    searched: Searched | None


@dataclass(eq=False)
class DeadEntry(ReadModel):
    """One dead-letter entry."""

    id: int
    name: str
    queue: str
    attempts: int
    failed_at: str | None
    error_type: str | None
    error_message: str | None
    arguments: Any
    label: str | None = None


@dataclass(eq=False)
class FailureGroupView(ReadModel):
    """Dead-letter entries of one job with the same error."""

    name: str
    error_type: str
    message: str
    count: int
    last_failed_at: str | None
    example_id: int


@dataclass(eq=False)
class DeadLetterPage(ReadModel):
    """One keyset page of the dead letter, with its entries grouped by job and error."""

    entries: list[DeadEntry]
    groups: list[FailureGroupView]
    count: int
    count_capped: bool
    next_before_id: int | None
    searched: Searched | None


# ----------------------------------------------------------------------------------- other views
@dataclass(eq=False)
class Parameter(ReadModel):
    """A parameter of a registered job (its default as Python text)."""

    name: str
    required: bool
    default: str | None


@dataclass(eq=False)
class EnqueueableJob(ReadModel):
    """A registered job the enqueue form offers."""

    name: str
    queue: str
    parameters: list[Parameter]
    doc: str


@dataclass(eq=False)
class ScheduleView(ReadModel):
    """A periodic job: its cron, the last slot run and the next three."""

    schema_name = "Schedule"  # errands.Schedule is the app's periodic job; the API's name stays

    name: str
    cron: str
    timezone: str
    last_slot: str | None
    next: list[str]
    queue: str
    source: str = "code"
    """"code" (``@app.periodic``: read-only here) or "database" (added, edited, paused, deleted at run time)."""
    job: str = ""
    arguments: Any = None
    """The arguments each run gets, as the payload JSON ``{"args": [...], "kwargs": {...}}``."""
    priority: int | None = None
    catch_up: str = "latest"
    catch_up_limit: int | None = None
    paused: bool = False
    version: int | None = None
    """A stored schedule's version, bumped by each change (None: from code)."""
    problem: str | None = None
    """Why a stored schedule cannot run in this app (its job is not registered, say); None when it can."""


@dataclass(eq=False)
class AuditEntry(ReadModel):
    """Who did what, when."""

    id: int
    at: str | None
    actor: str
    action: str
    target: str
    detail: str | None


@dataclass(eq=False)
class UserView(ReadModel):
    """A dashboard account, without its password hash."""

    username: str
    role: str
    disabled: bool
    last_login_at: str | None


@dataclass(eq=False)
class Recovered(ReadModel):
    """Jobs whose lease expired: given back to their queue, or buried with no attempts left."""

    released: list[int]
    buried: list[int]


# ----------------------------------------------------------------------------------- API answers
@dataclass(eq=False)
class Me(ReadModel):
    """The signed-in user and the CSRF token for writes."""

    username: str
    role: str
    theme: str
    csrf: str


@dataclass(eq=False)
class WorkerList(ReadModel):
    workers: list[WorkerView]


@dataclass(eq=False)
class QueueList(ReadModel):
    queues: list[QueueView]


@dataclass(eq=False)
class ScheduleList(ReadModel):
    """The app's periodic jobs."""

    schedules: list[ScheduleView]


@dataclass(eq=False)
class EnqueueForm(ReadModel):
    jobs: list[EnqueueableJob]


@dataclass(eq=False)
class AuditLog(ReadModel):
    entries: list[AuditEntry]


@dataclass(eq=False)
class UserList(ReadModel):
    users: list[UserView]


@dataclass(eq=False)
class BulkDone(ReadModel):
    """How many dead-letter entries a bulk action moved."""

    done: int


@dataclass(eq=False)
class NeedsConfirmation(ReadModel):
    """The first step of a bulk action: how many entries it would touch."""

    needs_confirmation: bool
    count: int
    hint: str


@dataclass(eq=False)
class QueueToggled(ReadModel):
    queue: str
    paused: bool


@dataclass(eq=False)
class WorkersCommanded(ReadModel):
    """Worker processes quieted, resumed or stopped from outside: each reads its command with its next
    heartbeat (within a third of its lease)."""

    action: str
    """"quiet", "resume" or "stop"."""
    workers: list[str]
    """The ids of the workers given the command."""
    refused: list[str] = field(default_factory=list)
    """Why the others were not (a stopping worker cannot be quieted or resumed)."""


@dataclass(eq=False)
class ScheduleDeleted(ReadModel):
    name: str
    deleted: bool


@dataclass(eq=False)
class PeriodicRun(ReadModel):
    job_id: int


@dataclass(eq=False)
class Cancelled(ReadModel):
    """"cancelled" (it will not run), "requested" (it is running) or "gone" (it had ended)."""

    outcome: str


@dataclass(eq=False)
class EnqueuedJobs(ReadModel):
    """The ids of the jobs an enqueue stored."""

    schema_name = "Enqueued"  # errands.testing.Enqueued is a job in users' tests; the API's name stays
    ids: list[int]


# ----------------------------------------------------------------------------------- operator tools
@dataclass(eq=False)
class FoundJob(ReadModel):
    """Where a job id leads: "jobs" (waiting or running), "dead" (the dead letter) or "results"
    (ended with a kept result), its state there and its page."""

    id: int
    where: str
    state: str
    url: str


@dataclass(eq=False)
class BulkPlan(ReadModel):
    """The first step of a bulk action on waiting jobs: how many it would change now (``capped``:
    at least that many; one call changes at most 100,000), and the ids it may touch: from ``since``
    (a name or text filter covers the newest 100,000 jobs) up to ``upto`` (the newest job now)."""

    needs_confirmation: bool
    action: str
    count: int
    capped: bool
    since: int
    upto: int
    queue: str | None
    priority: int | None
    hint: str


@dataclass(eq=False)
class BulkJobsDone(ReadModel):
    """What a confirmed bulk action changed: ``done`` jobs, of the ``counted`` the operator confirmed
    (fewer when some ran, ended or stopped matching meanwhile)."""

    action: str
    done: int
    counted: int



@dataclass(eq=False)
class RunningNow(ReadModel):
    """A job a worker holds now: since when (its claim), for how long, and whether its lease ran out."""

    id: int
    name: str
    queue: str
    since: str | None
    seconds: float | None
    progress: float | None
    stale: bool


@dataclass(eq=False)
class WorkerActivityRow(ReadModel):
    """One worker in the activity feed: what it runs now (at most ``RUNNING_SHOWN`` jobs, of
    ``running_count``) and how many jobs it has finished since it started."""

    id: str
    hostname: str
    alive: bool
    jobs_done: int
    running: list[RunningNow]
    running_count: int


@dataclass(eq=False)
class FailedAttempt(ReadModel):
    """A failed run from the error history (a retry or the last attempt)."""

    job_id: int
    attempt: int
    at: str
    error_type: str
    error_message: str
    name: str | None
    queue: str | None


@dataclass(eq=False)
class Outcome(ReadModel):
    """A kept outcome: a job that ended and kept its result (succeeded, failed, cancelled)."""

    id: int
    name: str
    queue: str
    state: str
    at: str
    message: str | None


@dataclass(eq=False)
class WorkerActivity(ReadModel):
    """The activity feed: per worker what it runs now; the newest failed attempts and kept
    outcomes of all workers (rows do not say which worker ran them); jobs held by no registered
    worker (``orphans``: their worker was pruned)."""

    now: str
    workers: list[WorkerActivityRow]
    orphans: list[RunningNow]
    failures: list[FailedAttempt]
    outcomes: list[Outcome]


@dataclass(eq=False)
class QueueLimitsView(ReadModel):
    """The limits an operator stored for a queue (workers apply them within seconds): at most
    ``concurrency`` running at once, at most ``rate`` starts ("10/60s"); None: no such limit."""

    queue: str
    concurrency: int | None
    rate: str | None
    text: str


# ----------------------------------------------------------------------------------- alerts
@dataclass(eq=False)
class AlertView(ReadModel):
    """An alert threshold crossed now: what was measured last and since when it is crossed."""

    kind: str
    queue: str | None
    value: float | None
    threshold: float | None
    since: str | None
    checked_at: str | None
    message: str


@dataclass(eq=False)
class AlertList(ReadModel):
    """The alerts crossed now (the dashboard's banners), and the thresholds this app configures."""

    alerts: list[AlertView]
    thresholds: dict[str, Any]


__all__ = [name for name, value in list(globals().items())
           if isinstance(value, type) and issubclass(value, ReadModel)] + ["JobDetail", "type_schema"]
