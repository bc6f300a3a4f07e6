"""errands: background jobs stored in the relational database you already run.

>>> from errands import Errands
>>> app = Errands("sqlite:///errands.db")
>>> @app.job(queue="mails", max_attempts=5)
... def send_welcome(user_id: int) -> None: ...
>>> handle = send_welcome.enqueue(user_id=42)   # doctest: +SKIP
"""

from .__version__ import __version__
from .app import Errands
from .errors import (
    ConfigurationError,
    EnqueueError,
    ErrandsError,
    InvalidOption,
    InvalidQueueName,
    JobNotFound,
    JobTimeout,
    PayloadNotSerializable,
    PayloadTooLarge,
    SchemaError,
    StoreError,
    StoreUnavailable,
    UnknownJob,
)
from .jobs import JobDefinition, JobHandle
from .retry import Backoff
from .store.rows import JobState
from .worker.context import JobContext, current_job

__all__ = [
    "Backoff",
    "ConfigurationError",
    "EnqueueError",
    "Errands",
    "ErrandsError",
    "InvalidOption",
    "InvalidQueueName",
    "JobContext",
    "JobDefinition",
    "JobHandle",
    "JobNotFound",
    "JobState",
    "JobTimeout",
    "PayloadNotSerializable",
    "PayloadTooLarge",
    "SchemaError",
    "StoreError",
    "StoreUnavailable",
    "UnknownJob",
    "__version__",
    "current_job",
]
