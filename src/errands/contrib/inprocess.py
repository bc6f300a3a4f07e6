"""A worker on a background thread of the web process, for deployments too small for a worker service.

The thread runs the same :class:`~errands.worker.runner.Worker` as ``errands worker`` does in
each of its processes, minus the supervisor: there is no hard timeout (a stuck handler is not
killed), and the web process's signals stay the web server's.  Stopping is the worker's own
graceful stop: it claims nothing more, gives buffered jobs back, lets running jobs finish for
``shutdown_timeout`` seconds, then gives the unfinished ones back to the queue with their attempt
refunded.  Nothing is lost either way: what is not finished is in the queue again, and a job whose
release could not be written comes back when its lease expires.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import threading
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from ..core.errors import ConfigurationError
from ..core.logs import ensure_errands_output
from ..worker.runner import Worker
from ..worker.settings import EMBEDDED_SHUTDOWN_TIMEOUT, WorkerSettings

if TYPE_CHECKING:
    from typing_extensions import Unpack

    from ..app import Errands
    from ..worker.settings import WorkerOptions

log = logging.getLogger("errands.contrib")

STOP_MARGIN = 5.0
"""Seconds past ``shutdown_timeout`` the stop waits for the worker to write its releases."""


class InProcessWorker:
    """Start with :meth:`start`, stop with :meth:`stop` (or :meth:`astop` from a coroutine).

    One per web process: each one registers in the workers table, claims jobs and runs up to
    ``concurrency`` of them at once on threads (async jobs share the worker's own event loop,
    never the web server's).  It takes every option of
    :class:`~errands.worker.settings.WorkerSettings` (``shutdown_timeout`` defaults to
    ``EMBEDDED_SHUTDOWN_TIMEOUT`` here), checked at once: a refused one raises ConfigurationError.
    """

    def __init__(self, app: Errands, queues: Sequence[str] | None = None, **options: Unpack[WorkerOptions]) -> None:
        options.setdefault("shutdown_timeout", EMBEDDED_SHUTDOWN_TIMEOUT)
        self.app = app
        self.settings = WorkerSettings.of(queues, **options)
        """The options (its queues are filled in at :meth:`start` when none were given)."""
        self.queues = self.settings.queues or None
        """Most important first; None: every queue a registered job names."""
        self.worker: Worker | None = None
        self.error: BaseException | None = None
        """What ended the worker's thread early, if anything did (it is also logged)."""
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    # The options as attributes, read from ``settings``, as an InProcessWorker offered them before.
    @property
    def concurrency(self) -> int:
        return self.settings.concurrency

    @property
    def shutdown_timeout(self) -> float:
        return self.settings.shutdown_timeout

    @property
    def sleep(self) -> float:
        return self.settings.sleep

    @property
    def scheduler(self) -> bool:
        return self.settings.scheduler

    @property
    def lease(self) -> float | None:
        return self.settings.lease

    def start(self) -> InProcessWorker:
        """Check the database, then start the thread; raises at once if the schema is missing or old."""
        with self._lock:
            if self.running:
                raise ConfigurationError("this in-process worker is already running")
            self.app.store.check()  # fail at start-up, in the caller, not later in a thread
            settings = replace(self.settings, queues=self.queues or tuple(self.app.default_queues()))
            self.worker = Worker(self.app, settings)
            self.error = None
            self._thread = threading.Thread(target=self._run, args=(self.worker,), name="errands-in-process",
                                            daemon=True)
            ensure_errands_output()  # under uvicorn or flask run nothing would print errands' INFO lines
            log.info("in-process errands worker %s started: queues %s, concurrency %d", self.worker.id,
                     ", ".join(settings.queues) or "none", settings.concurrency)
            self._thread.start()
        return self

    def _run(self, worker: Worker) -> None:
        try:
            worker.run()
        except BaseException as exc:  # noqa: B036 - recorded and logged; the thread ends either way
            self.error = exc
            log.exception("the in-process errands worker stopped on an error")
        finally:
            self.app.store.release_thread_connection()

    def stop(self, timeout: float | None = None) -> bool:
        """Stop gracefully; True when the thread ended (False: it is left to die with the process).

        ``timeout`` defaults to the shutdown timeout plus a few seconds for writing the releases.
        Past it the worker is told to give everything back at once, and gets a few more seconds.
        """
        thread, worker = self._thread, self.worker
        if thread is None or worker is None:
            return True
        worker.request_stop()
        thread.join(self.settings.shutdown_timeout + STOP_MARGIN if timeout is None else timeout)
        if thread.is_alive():
            log.warning("the in-process errands worker did not stop in time; giving its jobs back now")
            worker.request_stop(immediate=True)
            thread.join(STOP_MARGIN)
        if thread.is_alive():
            log.warning("the in-process errands worker is still busy; its leases will expire and its jobs "
                        "return to the queue")
            return False
        self._thread = None
        atexit.unregister(self.stop)  # (registered by start_worker; a no-op otherwise)
        log.info("in-process errands worker %s stopped after %d job(s)", worker.id, worker.jobs_done)
        return True

    async def astop(self, timeout: float | None = None) -> bool:
        """:meth:`stop` without blocking the event loop (for an ASGI lifespan)."""
        return await asyncio.to_thread(self.stop, timeout)


def start_worker(app: Errands, queues: Sequence[str] | None = None, *, stop_at_exit: bool = True,
                 **options: Unpack[WorkerOptions]) -> InProcessWorker:
    """Start an :class:`InProcessWorker` (``options``: its worker options); with ``stop_at_exit`` it is
    stopped when the interpreter exits (unless :meth:`~InProcessWorker.stop` was called before)."""
    worker = InProcessWorker(app, queues, **options).start()
    if stop_at_exit:
        atexit.register(worker.stop)
    return worker
