"""CPU time of a worker's process tree, so the benchmark can say what a job costs, not only how fast it went.

Standard library only: every system's script imports this (the project venv and the peers' venv).

A drain is measured from the first handled job to the N-th (bench/common.py).  The CPU figure
covers the same window: the worker tree is sampled when the first job is seen and again when the
N-th is, and the difference is divided by the jobs handled between the two samples.  Each sample
sums, over the worker command's process and all its descendants, ``utime + stime + cutime + cstime``
from ``/proc/<pid>/stat``: the process's own CPU time plus that of the children it has already
reaped, so a worker process that exits inside the window (``--burst``, a pool child) still counts,
in its parent's ``cutime``.  If the worker command itself has exited and was reaped by the
benchmark, it shows up in the benchmark's own ``RUSAGE_CHILDREN`` instead, which the sample adds.
The database server's CPU (PostgreSQL, MariaDB, Redis) is not in it: only the workers' own.

``/proc`` counts in clock ticks (usually 10 ms) per process, so a short drain's figure is coarse:
20,000 jobs at 40,000/s are 0.5 s of drain, and one tick is 0.5 µs a job there.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def stat_ticks(stat_line: str) -> int:
    """utime + stime + cutime + cstime, in clock ticks, from one ``/proc/<pid>/stat`` line.

    The command name (field 2) is in parentheses and may itself hold spaces and parentheses,
    so the fields are counted from the last ``)``.
    """
    rest = stat_line[stat_line.rindex(")") + 1:].split()
    # rest[0] is field 3 (state); utime, stime, cutime, cstime are fields 14-17.
    return sum(int(x) for x in rest[11:15])


def read_stat(pid: int) -> str | None:
    """The ``/proc/<pid>/stat`` line, or None when the process is gone (or is not on Linux)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read()
    except OSError:
        return None


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
                read: Callable[[int], str | None] = read_stat,
                reaped: Callable[[], float] = reaped_children_seconds,
                ticks_per_second: float = TICKS_PER_SECOND) -> CpuSample:
    """CPU seconds of ``root`` and its descendants (``children(root)``), plus ``reaped()``.

    ``read`` and ``reaped`` are parameters so the arithmetic can be tested on given inputs.
    """
    pids = (root, *children(root))
    ticks = 0
    seen = []
    for pid in pids:
        line = read(pid)
        if line is None:
            continue  # exited between the listing and the read: its parent's cutime has it once reaped
        ticks += stat_ticks(line)
        seen.append(pid)
    return CpuSample(seconds=ticks / ticks_per_second + reaped(), handled=handled, pids=tuple(seen))


def per_job_us(before: CpuSample, after: CpuSample) -> float | None:
    """CPU microseconds per job handled between two samples; None when no job was handled in between."""
    jobs = after.handled - before.handled
    if jobs <= 0:
        return None
    return max(after.seconds - before.seconds, 0.0) * 1e6 / jobs
