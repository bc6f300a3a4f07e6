"""Every exception errands raises on purpose descends from :class:`ErrandsError`.

Catching that one class is enough for "anything errands refused"; the tree below
lets callers be precise where they care::

    ErrandsError
    ├── ConfigurationError        bad URL, old SQLite, app that cannot be loaded
    ├── EnqueueError              the job was NOT stored; nothing was written
    │   ├── UnknownJob            name not registered in this app
    │   ├── InvalidQueueName      not a short identifier
    │   ├── InvalidOption         priority/delay/attempts out of range
    │   ├── PayloadNotSerializable  arguments JSON cannot encode
    │   └── PayloadTooLarge       encoded arguments over the configured cap
    ├── StoreError                the database said no
    │   ├── StoreUnavailable      cannot reach the database (retry later)
    │   └── SchemaError           tables missing or newer than this code
    ├── JobNotFound               no job / dead-letter entry with that id
    └── JobTimeout                a run exceeded its timeout (recorded as its error)

Driver exceptions are mapped at the store boundary (``raise StoreUnavailable(...)
from exc``) so that no caller needs to import psycopg or PyMySQL to handle them.
"""

from __future__ import annotations


class ErrandsError(Exception):
    """Root of every error errands raises deliberately."""


class ConfigurationError(ErrandsError):
    """The application, URL or environment is not usable as configured."""


class EnqueueError(ErrandsError):
    """A job was refused at enqueue time; nothing was written to the database."""


class UnknownJob(EnqueueError):
    """The job name is not registered in this app (only registered jobs run)."""


class InvalidQueueName(EnqueueError):
    """Queue names are short identifiers: letters, digits, '-', '_' and '.'."""


class InvalidOption(EnqueueError):
    """An enqueue option (priority, delay, attempts, timeout, ...) is out of range."""


class PayloadNotSerializable(EnqueueError):
    """Arguments must be JSON-encodable; errands never pickles."""


class PayloadTooLarge(EnqueueError):
    """Encoded arguments exceed the app's payload cap (default 64 KiB)."""


class StoreError(ErrandsError):
    """The database refused an operation."""


class StoreUnavailable(StoreError):
    """The database cannot be reached; the operation may succeed later."""


class SchemaError(StoreError):
    """errands' tables are missing or were created by a newer version."""


class JobNotFound(ErrandsError):
    """No job or dead-letter entry has the given id."""


class JobTimeout(ErrandsError):
    """A job run exceeded its timeout and was stopped."""
