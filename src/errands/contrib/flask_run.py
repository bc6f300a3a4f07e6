"""The in-process worker under ``flask run``: started only in the process that serves, and never
left registered when the development server stops.

``flask run --debug`` (or ``--reload``) is two processes: Werkzeug's reloader watches the files in
the parent, and a child (``WERKZEUG_RUN_MAIN=true``) serves.  Both build the app, so a worker started
in the factory ran in the parent too: two workers registered for one server.  Stopping was worse:

* a SIGTERM to the parent makes it exit at once and SIGKILL its serving child (``subprocess.call``'s
  clean-up), so the child's worker never unregistered and stayed "alive" in ``errands status``
  until its heartbeats were missed;
* without the reloader, SIGTERM's default action ended the process without running ``atexit``.

So, under ``flask run``: the reloader's parent starts no worker, and at its exit (whatever stopped
it) settles what its serving children left behind (their jobs back to the queue, attempt refunded,
their rows gone); each serving child tells it, through a file, which worker it runs.  A serving
process whose SIGTERM still has its default action exits normally instead (``SystemExit(0)``, as
Werkzeug's own reloader child does), so ``atexit`` stops its worker gracefully.  Outside ``flask
run`` (gunicorn, uWSGI, ``flask shell``, tests) nothing of this applies.
"""

from __future__ import annotations

import atexit
import logging
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ..core.errors import StoreError
from .inprocess import InProcessWorker
from .inprocess import start_worker as start_in_process

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..app import Errands
    from ..worker.settings import WorkerOptions

log = logging.getLogger("errands.contrib")

WORKERS_DIR = "ERRANDS_FLASK_RUN_WORKERS"
"""The variable the reloader's parent hands its serving children: a directory where each one writes
the id of the worker it runs (one file per worker), and removes it once that worker has stopped."""

Role = Literal["reloader", "serving"]


def flask_run_role() -> Role | None:
    """Which process of ``flask run`` this is: the reloader's parent (never serves), the serving
    process, or None outside ``flask run``."""
    if os.environ.get("FLASK_RUN_FROM_CLI") != "true":
        return None
    import click

    ctx = click.get_current_context(silent=True)
    if ctx is None or ctx.command.name != "run":
        return None  # another flask command (shell, routes, a custom one) building the app
    if os.environ.get("WERKZEUG_RUN_MAIN") == "true":
        return "serving"
    reload = ctx.params.get("reload")
    if reload is None:  # flask run's own default: the reloader follows --debug
        from flask.helpers import get_debug_flag

        reload = get_debug_flag()
    return "reloader" if reload else "serving"


def start_worker(app: Errands, queues: Sequence[str] | None = None, *, stop_at_exit: bool = True,
                 **options: Unpack[WorkerOptions]) -> InProcessWorker:
    """:func:`errands.contrib.inprocess.start_worker`, aware of ``flask run`` (see the module): in the
    reloader's parent it returns the worker unstarted (``running`` is False)."""
    role = flask_run_role()
    if role == "reloader":
        worker = InProcessWorker(app, queues, **options)  # bad options still fail here
        _settle_children_at_exit(app)
        log.info("flask run's reloader: the errands worker runs in the serving process, not in this one")
        return worker
    if role is None:
        return start_in_process(app, queues, stop_at_exit=stop_at_exit, **options)
    record = _Record()
    atexit.register(record.remove)  # (atexit runs last-registered first: this after the worker's stop)
    worker = start_in_process(app, queues, stop_at_exit=stop_at_exit, **options)
    if worker.worker is not None:
        record.write(worker.worker.id)
    _exit_normally_on_sigterm()
    return worker


class _Record:
    """This serving process's worker id, in the file the reloader's parent reads if it outlives us."""

    def __init__(self) -> None:
        folder = os.environ.get(WORKERS_DIR)
        self.path: Path | None = None
        self.folder = Path(folder) if folder else None

    def write(self, worker_id: str) -> None:
        if self.folder is None or not self.folder.is_dir():
            return
        self.path = self.folder / f"{os.getpid()}-{threading.get_ident()}"
        self.path.write_text(worker_id)

    def remove(self) -> None:
        if self.path is not None:
            self.path.unlink(missing_ok=True)


def _settle_children_at_exit(app: Errands) -> None:
    """In the reloader's parent: hand the children the directory, and at exit settle what they left."""
    if os.environ.get(WORKERS_DIR):
        return  # (the factory ran twice in this process: one directory is enough)
    folder = Path(tempfile.mkdtemp(prefix="errands-flask-run-"))
    os.environ[WORKERS_DIR] = str(folder)  # the reloader starts each child with a copy of os.environ

    def settle() -> None:
        try:
            for entry in folder.iterdir():
                owner = entry.read_text().strip()
                if owner:
                    settle_worker(app, owner)
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    atexit.register(settle)


def settle_worker(app: Errands, owner: str) -> None:
    """A worker killed before it could stop: its jobs back to the queue (attempt refunded, as in a
    graceful stop), its row out of the workers table."""
    try:
        held = app.store.jobs.reserved_by(owner)
        if held:
            n = app.store.jobs.release(owner, held)
            log.warning("released %d job(s) of the stopped serving process's worker %s", n, owner)
        app.store.workers.unregister(owner)
    except StoreError as exc:
        log.warning("could not settle worker %s of the stopped serving process (%s); its leases will expire",
                    owner, exc)


def _exit_normally_on_sigterm() -> None:
    """SIGTERM ends the development server with a normal exit (``atexit`` runs), unless someone
    already handles it; only the main thread may set a handler."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None):
        return

    def exit_normally(signum: int, frame: Any) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # a second SIGTERM ends the process at once
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, exit_normally)
