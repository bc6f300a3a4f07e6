"""What a running handler can learn about the run it is part of."""

from __future__ import annotations

import contextvars
from dataclasses import dataclass

from ..errors import ErrandsError


@dataclass(frozen=True)
class JobContext:
    id: int
    name: str
    queue: str
    attempt: int
    """1 for the first run; counted when the job was claimed."""
    max_attempts: int
    worker_id: str

    @property
    def is_last_attempt(self) -> bool:
        return self.attempt >= self.max_attempts


_current: contextvars.ContextVar[JobContext | None] = contextvars.ContextVar("errands_current_job", default=None)


def current_job() -> JobContext:
    """The job this handler is running for; raises outside a worker."""
    ctx = _current.get()
    if ctx is None:
        raise ErrandsError("current_job() is only available inside a job run by an errands worker")
    return ctx


def set_current(ctx: JobContext | None) -> contextvars.Token[JobContext | None]:
    return _current.set(ctx)


def reset_current(token: contextvars.Token[JobContext | None]) -> None:
    _current.reset(token)
