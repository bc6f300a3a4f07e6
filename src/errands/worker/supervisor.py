"""The process that ``errands worker`` runs: it forks worker processes and watches them.

Worker processes claim and run their own jobs, so no job costs an IPC round trip.
Each writes "job id + deadline" per thread into a shared-memory
:class:`~errands.worker.slots.SlotTable`; the supervisor reads those tables a few
times a second.  When a job overruns its timeout the supervisor kills that
process (the only way to stop code blocked in ``time.sleep`` or C), records the
run as failed with :class:`~errands.core.errors.JobTimeout`, gives the process's other
jobs back untouched, and starts a replacement.  A process that dies on its own
(segfault, ``os._exit`` in a job, the OOM killer) is handled the same way, except
that every job it was running is charged the attempt, since any of them may have
killed it.

Signals: the first SIGTERM/SIGINT asks every process to stop claiming and finish
(within ``--shutdown-timeout``: SIGTERM to each); a second asks them to give their
jobs back and exit at once (SIGUSR1); a third kills them.  A worker process treats any
number of SIGTERMs as "finish" (a service manager may signal it directly too); only the
supervisor's SIGUSR1 means "now".  Worker processes run in their own process
group so that Ctrl-C in a terminal reaches only the supervisor.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import multiprocessing
import os
import signal
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.endings import Buried, Result, RunOutcome, announce
from ..core.errors import ConfigurationError, JobTimeout, SchemaError, StoreError
from ..core.rows import ClaimedJob
from .control import EXIT_RECYCLE
from .runner import Worker
from .settings import PROCESSES, WorkerSettings
from .slots import SlotTable

if TYPE_CHECKING:
    from .host import RunHost

log = logging.getLogger("errands.supervisor")

_ctx = multiprocessing.get_context("fork")
EXIT_CONFIG = 78
POLL = 0.1
"""Seconds between looks at the slot tables while jobs run: timeouts are enforced to within this."""
IDLE_POLL = 0.25
"""Seconds between looks while no process runs a job.  Waking a process costs about 0.1 ms of CPU
on a small VM, so an idle supervisor stays near 0.05 % of a core; a job that starts meanwhile is
seen at most this late, which only matters for timeouts shorter than this."""
_PR_SET_PDEATHSIG = 1
_STOP_SIGNALS = {signal.SIGTERM, signal.SIGUSR1}
STOP_NOW = signal.SIGUSR1
"""What the supervisor sends for "give jobs back and exit now".  Not a second SIGTERM: two
signals of one kind that arrive before the process runs its handler count as one, so under
load the second request would be lost and the process would wait for its jobs instead."""


@dataclass
class _Child:
    index: int
    process: Any
    slots: SlotTable
    id_cell: Any
    started: float = field(default_factory=time.monotonic)

    @property
    def worker_id(self) -> str:
        return bytes(self.id_cell.value).decode()


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this process when the supervisor dies (no orphans running jobs)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the heartbeat thread checks getppid() instead
        pass


def _child_main(app: RunHost, settings: WorkerSettings, slots: SlotTable, id_cell: Any, parent: int) -> None:
    os.setpgrp()
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    code = 0
    try:
        worker = Worker(app, settings, slots=slots, parent_pid=parent)
        id_cell.value = worker.id.encode()
        worker.install_signal_handlers(supervised=True)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _STOP_SIGNALS)  # a stop sent while starting arrives now
        worker.run()
        if worker.recycling:
            code = EXIT_RECYCLE
    except (ConfigurationError, SchemaError) as exc:  # only these stop every process (exit 78)
        log.error("worker process cannot run: %s", exc)
        code = EXIT_CONFIG
    except Exception:  # restarted with a growing pause; the jobs it ran are charged their attempt
        log.exception("worker process crashed")
        code = 1
    logging.shutdown()
    os._exit(code)


class Supervisor:
    def __init__(self, app: RunHost, settings: WorkerSettings, processes: int = PROCESSES.default) -> None:
        self.app = app
        self.settings = settings  # (checked when it was built)
        self.processes: int = PROCESSES.check(processes)
        self.children: dict[int, _Child] = {}
        self.signals = 0
        self._handled_signals = 0
        self._crashes = 0
        self._restarts: dict[int, float] = {}
        self.exit_code = 0
        self._ended_runs = 0  # runs of processes already gone (replaced ones included)

    @property
    def jobs_run(self) -> int:
        """Runs ended in this supervisor's processes, the ones it replaced included: its closing line
        (a run killed for its timeout, or in a process that died, counts, as it ended too)."""
        return self._ended_runs + sum(child.slots.finished() for child in self.children.values())

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.signals += 1

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)
        self.app.store.close()  # never carry a connection across fork
        for index in range(self.processes):
            self._spawn(index)
        while self.children or (self._restarts and not self.stopping):
            self._forward_signals()
            self._enforce_deadlines()
            self._reap()
            self._restart_due()
            busy = any(child.slots.busy() for child in self.children.values())
            time.sleep(POLL if busy or self._restarts else IDLE_POLL)
        return self.exit_code

    def _restart_due(self) -> None:
        """Replace crashed processes once their back-off has passed (never while stopping)."""
        now = time.monotonic()
        for index, when in list(self._restarts.items()):
            if self.stopping:
                del self._restarts[index]
            elif now >= when:
                del self._restarts[index]
                self._spawn(index)

    @property
    def stopping(self) -> bool:
        return self.signals > 0

    def _spawn(self, index: int) -> None:
        slots = SlotTable(self.settings.concurrency)
        id_cell = _ctx.Array("c", 160, lock=False)
        process = _ctx.Process(target=_child_main, name=f"errands-worker-{index}",
                               args=(self.app, self.settings, slots, id_cell, os.getpid()))
        # Until the new process has its own handlers, a forwarded SIGTERM would run the copy of
        # the supervisor's handler inherited through fork and be lost: the process would then run
        # on and the supervisor wait for it forever.  It is born with the signal blocked instead
        # (pending, not lost) and unblocks it once the worker's handlers are in place.
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
        try:
            process.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)
        assert process.pid is not None  # set by start()
        self.children[process.pid] = _Child(index, process, slots, id_cell)

    def _forward_signals(self) -> None:
        while self._handled_signals < self.signals:
            self._handled_signals += 1
            nth = self._handled_signals
            if nth == 1:
                log.warning("stopping: finishing running jobs (up to %.0fs); signal again to stop now",
                            self.settings.shutdown_timeout)
            elif nth == 2:
                log.warning("stopping now: giving running jobs back to the queue")
            for pid in self.children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM if nth == 1 else STOP_NOW if nth == 2 else signal.SIGKILL)

    def _enforce_deadlines(self) -> None:
        now = time.monotonic()
        for pid, child in list(self.children.items()):
            late = child.slots.overdue(now)
            if not late:
                continue
            log.error("job(s) %s overran their timeout; killing worker process %d", late, pid)
            child.process.kill()
            child.process.join()
            del self.children[pid]
            self._ended_runs += child.slots.finished() + len(late)
            self._settle_dead(child, late, "errands.JobTimeout",
                              "job exceeded its timeout of {timeout}s and was stopped", timed_out=True)
            if not self.stopping:
                self._spawn(child.index)

    def _reap(self) -> None:
        for pid, child in list(self.children.items()):
            code = child.process.exitcode
            if code is None:
                continue
            child.process.join()
            del self.children[pid]
            self._ended_runs += child.slots.finished()
            if code == 0:
                continue  # done: its work (--burst, --max), or stopped from outside
            if code == EXIT_RECYCLE and not child.slots.running():
                if not self.stopping:
                    log.warning("worker process %d recycled (--max-memory); starting a fresh one", pid)
                    self._spawn(child.index)
                continue
            if code == EXIT_CONFIG:
                self.exit_code = EXIT_CONFIG
                self.signals = max(self.signals, 1)
                continue
            running = [job_id for _, job_id, _ in child.slots.running()]
            self._ended_runs += len(running)
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            log.error("worker process %d died (%s) while running %s", pid, how, running or "nothing")
            self._settle_dead(child, running, "errands.WorkerDied",
                              f"the worker process died ({how}) while running this job")
            if not self.stopping:
                # A process that keeps dying right after start (a broken import, a poisoned
                # environment) is restarted with growing pauses, without blocking this loop.
                self._crashes = self._crashes + 1 if time.monotonic() - child.started < 5 else 0
                self._restarts[child.index] = time.monotonic() + min(30.0, 0.1 * 2 ** min(self._crashes, 9))

    def _settle_dead(self, child: _Child, charged: list[int], error_type: str, message: str,
                     timed_out: bool = False) -> None:
        """Fail the charged runs, give everything else the process held back untouched.  A run that
        overran its timeout counts as having raised JobTimeout (its job's ``retry_on`` decides).
        The endings are decided and applied by ``store.endings``, and their ``on_retry`` /
        ``on_dead`` hooks run here, in the supervisor."""
        owner = child.worker_id
        if not owner:
            return
        store = self.app.store

        def outcome_of(row: ClaimedJob) -> RunOutcome:
            text = message.format(timeout=f"{row.timeout:g}" if row.timeout else "?")
            return RunOutcome(row, Result.ERROR, 0.0, error_type, text, JobTimeout(text) if timed_out else None)

        for attempt in range(5):
            try:
                for row, settlement in store.endings.end_held(owner, charged, outcome_of, self.app.policies):
                    if isinstance(settlement, Buried):
                        log.warning("job %d moved to the dead letter: %s: %s", row.id, error_type,
                                    settlement.error_message)
                    else:
                        log.warning("job %d will be retried: %s: %s", row.id, error_type, outcome_of(row).error_message)
                    announce(self.app, row, settlement)
                rest = [job_id for job_id in store.jobs.reserved_by(owner) if job_id not in charged]
                if rest:
                    store.jobs.release(owner, rest)
                store.workers.unregister(owner)
                return
            except StoreError as exc:
                log.warning("cannot settle jobs of a dead worker process yet: %s", exc)
                time.sleep(0.5 * (attempt + 1))
        log.error("gave up settling jobs of worker %s; their leases will expire", owner)
