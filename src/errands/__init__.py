"""errands: background jobs stored in the relational database you already run.

>>> from errands import Errands
>>> app = Errands("sqlite:///errands.db")
>>> @app.job(queue="mails", max_attempts=5)
... def send_welcome(user_id: int) -> None: ...
>>> handle = send_welcome.enqueue(user_id=42)   # doctest: +SKIP
"""

from .__version__ import __version__
from .app import BatchHandle, Errands, Schedule, WorkflowHandle
from .core.alerts import Alert
from .core.context import JobContext, current_job
from .core.cron import Cron
from .core.errors import (
    BadPayload,
    CheckpointTooLarge,
    ConfigurationError,
    DeadlineExceeded,
    Discard,
    EnqueueError,
    ErrandsError,
    Interrupted,
    InvalidOption,
    InvalidQueueName,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobTimeout,
    PayloadNotSerializable,
    PayloadTooLarge,
    Retry,
    SchemaError,
    Snooze,
    StoreError,
    StoreUnavailable,
    UnknownJob,
)
from .core.hooks import Hooks
from .core.jobs import JobDefinition, JobHandle
from .core.limits import RateLimit
from .core.retry import Backoff
from .core.rows import BatchRow, FailedJob, JobState, ResultRow, StepRow, WorkflowRow
from .core.workflows import StepRef, Workflow, chain, group

__all__ = [
    "Alert",
    "Backoff",
    "BadPayload",
    "BatchHandle",
    "BatchRow",
    "CheckpointTooLarge",
    "ConfigurationError",
    "Cron",
    "DeadlineExceeded",
    "Discard",
    "EnqueueError",
    "Errands",
    "ErrandsError",
    "FailedJob",
    "Hooks",
    "Interrupted",
    "InvalidOption",
    "InvalidQueueName",
    "JobCancelled",
    "JobContext",
    "JobDefinition",
    "JobExpired",
    "JobFailed",
    "JobHandle",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "RateLimit",
    "ResultRow",
    "Retry",
    "Schedule",
    "SchemaError",
    "Snooze",
    "StepRef",
    "StepRow",
    "StoreError",
    "StoreUnavailable",
    "UnknownJob",
    "Workflow",
    "WorkflowHandle",
    "WorkflowRow",
    "__version__",
    "chain",
    "current_job",
    "group",
]
