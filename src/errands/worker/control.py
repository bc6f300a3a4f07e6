"""What a worker process is told from outside, and when it recycles itself.

An operator quiets or stops one worker process (the dashboard's Workers page, ``errands workers``,
the JSON API) by leaving a command in its row of the workers table; the process reads it with its
heartbeat (the same statement where the database allows it), so the command works across hosts and
through connection poolers, and takes effect within one heartbeat (a third of the lease):

- ``quiet``: claim nothing more; buffered jobs no runner started go back to the queue; running
  jobs finish; the process stays alive, heart-beating, listed as quiet.  Taking the command back
  (``resume``) makes it claim again.
- ``stop``: as SIGTERM: claim nothing more, finish the running jobs (within
  ``--shutdown-timeout``), exit 0.  Under ``errands worker`` the supervisor does not replace a
  process that exited 0, and exits itself once its last process has: a host being drained empties.

``--max-memory MB`` (:attr:`WorkerSettings.max_memory`): after a run that leaves the process's
resident memory above the limit, the process stops claiming, finishes its running jobs and exits
with :data:`EXIT_RECYCLE`, which the supervisor answers with a fresh process at once.
"""

from __future__ import annotations

import logging
import os
import sys

log = logging.getLogger("errands.worker")

QUIET = "quiet"
"""The command (and the status a worker reports): claim nothing more, stay alive."""
STOP = "stop"
"""The command: finish the running jobs and exit, as SIGTERM."""
COMMANDS = (QUIET, STOP)
STOPPING = "stopping"
"""The status a worker reports while it finishes its jobs before exiting (a stop, a signal, a recycle)."""
EXIT_RECYCLE = 75
"""A worker process's exit code for "replace me with a fresh process" (``--max-memory``): any other
graceful exit (0) is final, a crash is replaced after a pause."""


def describe(command: str | None, status: str | None) -> str:
    """A worker's state as its row reads (the operator's ``command``, the worker's own ``status``):
    "running", "quiet", "stopping", or a command the worker has not seen yet ("... requested")."""
    if status == STOPPING:
        return STOPPING
    if command == STOP:
        return "stop requested"
    if command == QUIET:
        return QUIET if status == QUIET else "quiet requested"
    return "resume requested" if status == QUIET else "running"


def command_of(value: object) -> str | None:
    """The command an operator left (read from the database: untrusted); None for none or an
    unknown one (an errands newer than this one may know more; this one runs on)."""
    if value is None:
        return None
    if value in COMMANDS:
        return str(value)
    log.debug("ignoring an unknown worker command %r", value)
    return None


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def resident_mb() -> float | None:
    """This process's resident memory now, in MB (2**20 bytes): ``/proc/self/statm`` on Linux (a few
    microseconds); elsewhere the peak so far (``getrusage``), which only grows, so a limit crossed
    stays crossed; None when neither can be read."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * _PAGE / 2**20
    except (OSError, ValueError, IndexError):
        pass
    try:
        import resource  # not on Windows
    except ImportError:
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # bytes on macOS, KB elsewhere
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10
