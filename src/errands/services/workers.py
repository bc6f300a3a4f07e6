"""Quieting, resuming and stopping worker processes from outside (the Workers page, ``errands
workers``, the JSON API), each audited.

A command is left in the worker's row of the workers table and read by the worker with its next
heartbeat (:mod:`errands.worker.control`), so it reaches a worker on any host, through any pooler:

- ``quiet``: it claims nothing more and gives back the jobs it buffered; running jobs finish; it
  stays alive, listed as quiet.
- ``resume``: a quiet worker claims again.
- ``stop``: as SIGTERM: it finishes its running jobs and exits (under ``errands worker``, the
  supervisor does not replace it).  A stop cannot be taken back, and a stopping worker is not quieted.

A command reaches every worker process of one host at once with ``host=`` (a host being drained).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import ErrandsError
from ..worker.control import QUIET, STOP, STOPPING
from .models import WorkersCommanded

if TYPE_CHECKING:
    from ..app import Errands

ACTIONS: dict[str, tuple[str | None, tuple[str | None, ...]]] = {
    "quiet": (QUIET, (None, QUIET)),
    "resume": (None, (None, QUIET)),
    "stop": (STOP, (None, QUIET, STOP)),
}
"""Each action: the command it leaves, and the commands it may replace (a stop is final)."""
MAX_NAME = 255


class WorkerNotFound(ErrandsError):
    """No worker with that id (or none on that host) is registered."""


class CommandRefused(ErrandsError):
    """The worker cannot take that command (an unknown action; a stopping worker quieted or resumed)."""


def command_worker(app: Errands, actor: str, action: str, worker_id: str) -> WorkersCommanded:
    """Quiet, resume or stop one worker process (its id as the Workers page and ``errands workers``
    list it), audited."""
    command, replacing = _action(action)
    _check_name(worker_id, "worker id")
    if not app.store.workers.command(worker_id, command, replacing):
        if not any(w.id == worker_id for w in app.store.workers.list_workers()):
            raise WorkerNotFound(f"no worker {worker_id!r} is registered (errands workers lists them)")
        raise CommandRefused(f"worker {worker_id} is stopping: a stop cannot be taken back")
    app.store.accounts.audit(actor, action, f"worker {worker_id}")
    return WorkersCommanded(action, [worker_id])


def command_host(app: Errands, actor: str, action: str, hostname: str) -> WorkersCommanded:
    """Quiet, resume or stop every worker process registered on ``hostname``, audited; those that
    cannot take the command (stopping already) are listed as refused."""
    command, replacing = _action(action)
    _check_name(hostname, "host name")
    ids = [w.id for w in app.store.workers.list_workers() if w.hostname == hostname]
    if not ids:
        raise WorkerNotFound(f"no worker is registered on host {hostname!r}")
    done, refused = [], []
    for worker_id in ids:
        if app.store.workers.command(worker_id, command, replacing):
            done.append(worker_id)
        else:
            refused.append(f"{worker_id}: {STOPPING}")
    app.store.accounts.audit(actor, action, f"host {hostname}", ", ".join(done) or "no worker could take it")
    return WorkersCommanded(action, done, refused)


def _action(action: str) -> tuple[str | None, tuple[str | None, ...]]:
    if action not in ACTIONS:
        raise CommandRefused(f"the action must be one of {', '.join(ACTIONS)}, not {action!r}")
    return ACTIONS[action]


def _check_name(value: object, what: str) -> None:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME or not value.isprintable():
        raise WorkerNotFound(f"not a {what}: {value!r}"[:300])


__all__ = ["ACTIONS", "CommandRefused", "WorkerNotFound", "command_host", "command_worker"]
