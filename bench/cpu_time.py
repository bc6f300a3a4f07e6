"""CPU time of a worker's process tree, so the benchmark can say what a job costs, not only how fast it went.

Standard library only: every system's script imports this (the project venv and the peers' venv).

A drain is measured from the first handled job to the N-th (bench/common.py).  The CPU figure
covers the same window: the worker tree is sampled when the first job is seen and again when the
N-th is, and the difference is divided by the jobs handled between the two samples.  Each sample
sums, over the worker command's process and all its descendants, the process's own CPU time (all
its threads, the exited ones too) and that of the children it has already reaped (``cutime +
cstime`` of ``/proc/<pid>/stat``), so a worker process that exits inside the window (``--burst``,
a pool child) still counts, in its parent.  If the worker command itself has exited and was
reaped by the benchmark, it shows up in the benchmark's own ``RUSAGE_CHILDREN`` instead, which the
sample adds.  The database server's CPU (PostgreSQL, MariaDB, Redis) is not in it: only the
workers' own.

A process's own time is read from its CPU-time clock (``clock_getcpuclockid``, nanoseconds):
``/proc/<pid>/stat`` counts in clock ticks (usually 10 ms), too coarse for a drain that lasts a
tenth of a second.  ``utime + stime`` is the fallback where that clock cannot be read.  Reaped
children are only known in ticks.
"""

from __future__ import annotations

import ctypes
import os
import resource
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_ticks(stat_line: str) -> tuple[int, int]:
    """(utime + stime, cutime + cstime) in clock ticks, from one ``/proc/<pid>/stat`` line: the process's
    own CPU time and that of the children it has reaped.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ``)``.
    """
    rest = stat_line[stat_line.rindex(")") + 1:].split()
    # rest[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return utime + stime, cutime + cstime


def process_clock_seconds(pid: int) -> float | None:
    """CPU seconds of a whole process, to the nanosecond (its CPU-time clock); None if it cannot be read."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        clock = ctypes.c_int()
        if libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
            return None
        return time.clock_gettime(clock.value)
    except (OSError, AttributeError, ValueError):
        return None


def read_process(pid: int) -> tuple[float, float] | None:
    """(own CPU seconds, reaped children's CPU seconds) of one process; None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            own_ticks, children_ticks = stat_ticks(f.read())
    except (OSError, ValueError):
        return None
    own = process_clock_seconds(pid)
    if own is None:
        own = own_ticks / TICKS_PER_SECOND
    return own, children_ticks / TICKS_PER_SECOND


def reaped_children_seconds() -> float:
    """CPU seconds of this process's children that it has already waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


@dataclass(frozen=True)
class CpuSample:
    """The worker tree's CPU time at one moment, and how many jobs had been handled then."""

    seconds: float
    handled: int
    pids: tuple[int, ...]


def sample_tree(root: int, handled: int, children: Callable[[int], Iterable[int]],
                read: Callable[[int], tuple[float, float] | None] = read_process,
                reaped: Callable[[], float] = reaped_children_seconds) -> CpuSample:
    """CPU seconds of ``root`` and its descendants (``children(root)``), each with its reaped children,
    plus ``reaped()`` (the benchmark's own reaped children, ``root`` once it has exited).

    ``read`` and ``reaped`` are parameters so the arithmetic can be tested on given inputs.
    """
    total = 0.0
    seen = []
    for pid in (root, *children(root)):
        times = read(pid)
        if times is None:
            continue  # exited between the listing and the read: its parent has it once it is reaped
        total += times[0] + times[1]
        seen.append(pid)
    return CpuSample(seconds=total + reaped(), handled=handled, pids=tuple(seen))


def per_job_us(before: CpuSample, after: CpuSample) -> float | None:
    """CPU microseconds per job handled between two samples; None when no job was handled in between."""
    jobs = after.handled - before.handled
    if jobs <= 0:
        return None
    return max(after.seconds - before.seconds, 0.0) * 1e6 / jobs
