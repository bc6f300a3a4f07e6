"""Helpers shared by every per-system benchmark script (standard library only).

Each system's script is run by a different interpreter (errands' and the bare
loops' by the project venv, the peers' by bench/.venv-peers), so this module
imports nothing but the standard library.

How "handled" is observed, the same way for every system: the no-op job writes
one line into a named pipe (FIFO) whose path is in ``BENCH_FIFO``.  A drain job
writes an empty line; a latency job writes ``time.time() - stamp``.  The
benchmark script reads the pipe in a thread, so it knows when the first and the
N-th job were handled without asking any database or broker.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import cpu_time

FIFO_ENV = "BENCH_FIFO"
BULK_BATCH = 1000  # jobs per bulk-enqueue call, for every system that has one

# ---------------------------------------------------------------------------- the job's side


class _Mark:
    """Writes one line per handled job into the FIFO (opened once per process)."""

    def __init__(self) -> None:
        self.fd: int | None = None
        self.pid = -1
        self.lock = threading.Lock()

    def _open(self) -> int:
        with self.lock:
            if self.pid != os.getpid() or self.fd is None:
                path = os.environ.get(FIFO_ENV)
                if not path:
                    raise RuntimeError(f"{FIFO_ENV} is not set: the benchmark job has nowhere to report")
                self.fd = os.open(path, os.O_WRONLY)
                self.pid = os.getpid()
            return self.fd

    def __call__(self, stamp: float) -> None:
        fd = self.fd if self.pid == os.getpid() and self.fd is not None else self._open()
        if stamp:
            os.write(fd, f"{stamp!r} {time.time()!r}\n".encode())
        else:
            os.write(fd, b"\n")


mark = _Mark()
"""``mark(stamp)``: the whole body of every system's no-op job."""


# ---------------------------------------------------------------------------- the benchmark's side


class Collector:
    """Reads the FIFO in a thread: counts handled jobs, keeps latencies, times first and last."""

    def __init__(self, workdir: str) -> None:
        self.path = os.path.join(workdir, "handled.fifo")
        if os.path.exists(self.path):
            os.unlink(self.path)
        os.mkfifo(self.path)
        # Read end first (non-blocking), then our own write end so the pipe never reports EOF
        # while no worker has it open yet.
        self._rfd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        self._keep = os.open(self.path, os.O_WRONLY)
        self.count = 0
        self.starts: list[tuple[float, float]] = []
        """(stamp, time.time() when the job started) per latency job."""
        self.first: float | None = None
        self.last: float | None = None
        self.target: int | None = None
        self.t_target: float | None = None
        self._changed = threading.Condition()
        self._on_first: Callable[[], None] | None = None
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="bench-collector", daemon=True)
        self._thread.start()

    @property
    def env(self) -> dict[str, str]:
        return {FIFO_ENV: self.path}

    def _run(self) -> None:
        buf = b""
        while not self._stop:
            ready, _, _ = select.select([self._rfd], [], [], 0.2)
            if not ready:
                continue
            try:
                data = os.read(self._rfd, 1 << 16)
            except BlockingIOError:
                continue
            now = time.perf_counter()
            if not data:
                continue
            buf += data
            *lines, buf = buf.split(b"\n")
            if not lines:
                continue
            hook = None
            with self._changed:
                if self.first is None:
                    self.first = now
                    hook, self._on_first = self._on_first, None
                for line in lines:
                    if line:
                        stamp, started = line.split()
                        self.starts.append((float(stamp), float(started)))
                self.count += len(lines)
                self.last = now
                if self.target is not None and self.t_target is None and self.count >= self.target:
                    self.t_target = now
                self._changed.notify_all()
            if hook is not None:
                hook()  # in this thread, right after the first read: no wake-up of another thread to wait for
            # Batch wake-ups: at most ~1000 reads a second, so the reader costs little CPU.
            time.sleep(0.001)

    def wait_for(self, count: int, timeout: float, alive: Callable[[], bool] | None = None) -> bool:
        """Block until ``count`` jobs were handled; False on timeout or when ``alive()`` turns False."""
        deadline = time.monotonic() + timeout
        with self._changed:
            self.target = count
            self.t_target = self.last if self.count >= count else None
            while self.count < count:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
                if alive is not None and self.count < count and not alive():
                    # The workers are gone; give the pipe a moment to deliver what they wrote.
                    self._changed.wait(0.5)
                    return self.count >= count
            return True

    def at_first(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` (in the reading thread) as soon as the first handled job is read; at once if it was."""
        with self._changed:
            if self.first is None:
                self._on_first = hook
                return
        hook()

    def close(self) -> None:
        self._stop = True
        self._thread.join(timeout=2)
        for fd in (self._rfd, self._keep):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            os.unlink(self.path)
        except OSError:
            pass


# ---------------------------------------------------------------------------- processes


def start_workers(cmd: Sequence[str], env: dict[str, str], log_path: str, cwd: str | None = None) -> subprocess.Popen:
    """Start a worker command in its own process group, stdout/stderr to a log file."""
    full_env = dict(os.environ)
    full_env.update(env)
    log = open(log_path, "ab")
    return subprocess.Popen(list(cmd), env=full_env, stdout=log, stderr=subprocess.STDOUT, cwd=cwd,
                            start_new_session=True)


def stop_workers(proc: subprocess.Popen, grace: float = 10.0, sig: int = signal.SIGTERM) -> None:
    """Ask the worker's process group to stop, then kill what is left."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # stragglers of the group (pool children, forks)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def descendants(pid: int) -> list[int]:
    """Every descendant pid of ``pid`` (Linux /proc)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            tasks = os.listdir(f"/proc/{p}/task")
        except OSError:
            continue
        for t in tasks:
            try:
                with open(f"/proc/{p}/task/{t}/children") as f:
                    kids = [int(x) for x in f.read().split()]
            except OSError:
                continue
            out += kids
            todo += kids
    return out


def rss_kib(pid: int) -> int | None:
    """VmRSS of a process in KiB, None when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def tail(path: str, lines: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            text = f.read()[-8000:].decode("utf-8", "replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


# ---------------------------------------------------------------------------- numbers


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100)."""
    if not values:
        raise ValueError("no values")
    ordered = sorted(values)
    rank = max(1, int(-(-q * len(ordered) // 100)))  # ceil(q/100 * n)
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


# ---------------------------------------------------------------------------- one benchmark run


def save_results(name: str, report: dict[str, Any], table: str) -> None:
    """Write ``report`` as bench/results/<name>.json and ``table`` as <name>.md (every bench's one format)."""
    here = os.path.dirname(os.path.abspath(__file__))
    base = os.path.join(here, "results", name)
    os.makedirs(os.path.dirname(base), exist_ok=True)
    with open(base + ".json", "w") as f:
        json.dump(report, f, indent=2)
    with open(base + ".md", "w") as f:
        f.write(table)
    print(f"written: {os.path.relpath(base, os.path.dirname(here))}.json and .md", file=sys.stderr)


def parser(description: str) -> argparse.ArgumentParser:
    """The CLI every system's script shares."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--mode", required=True, choices=["enqueue", "bulk", "drain", "io", "latency", "scale", "info"])
    p.add_argument("--jobs", type=int, default=1000, help="jobs to enqueue or drain")
    p.add_argument("--processes", type=int, default=1, help="worker processes (drain, latency)")
    p.add_argument("--samples", type=int, default=200, help="latency samples")
    p.add_argument("--interval", type=float, default=0.02, help="seconds between latency samples")
    p.add_argument("--db-url", default="", help="database or broker URL (fresh, made by bench/run.py)")
    p.add_argument("--workdir", default="", help="scratch directory (FIFO, logs, SQLite files)")
    p.add_argument("--timeout", type=float, default=300.0, help="give up a drain after this many seconds")
    p.add_argument("--waiting", type=int, default=0, help="scale: jobs waiting in the table")
    return p


def run_main(system: str, handlers: dict[str, Callable[[argparse.Namespace], dict[str, Any]]],
             description: str) -> None:
    """Parse the CLI, run one mode, print exactly one JSON line (an error is a JSON line too)."""
    args = parser(description).parse_args()
    own_tmp = None
    if not args.workdir:
        own_tmp = tempfile.mkdtemp(prefix=f"bench-{system}-")
        args.workdir = own_tmp
    os.makedirs(args.workdir, exist_ok=True)
    started = time.perf_counter()
    try:
        handler = handlers.get(args.mode)
        if handler is None:
            result: dict[str, Any] = {"na": f"{system} has no {args.mode}"}
        else:
            result = handler(args)
    except Exception as exc:  # reported to the driver as data, never a traceback on stdout
        import traceback

        traceback.print_exc(file=sys.stderr)
        result = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    result.setdefault("system", system)
    result.setdefault("mode", args.mode)
    result.setdefault("jobs", args.jobs)
    result.setdefault("processes", args.processes)
    result["wall_seconds"] = round(time.perf_counter() - started, 3)
    if own_tmp:
        import shutil

        shutil.rmtree(own_tmp, ignore_errors=True)
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def enqueue_result(n: int, started: tuple[float, float], **extra: Any) -> dict[str, Any]:
    """The figures of ``n`` jobs enqueued since ``started`` (:func:`enqueue_clocks` before the first):
    jobs/s, and ``cpu_us_per_job``, the CPU this (enqueuing) process spent per job, its driver's
    included and the database server's not: what an application pays per enqueued job."""
    wall, cpu = enqueue_clocks()
    dt = wall - started[0]
    return {"value": n / dt, "unit": "jobs/s", "seconds": round(dt, 4),
            "cpu_us_per_job": (cpu - started[1]) / n * 1e6, **extra}


def enqueue_clocks() -> tuple[float, float]:
    """(wall, this process's CPU) now, for :func:`enqueue_result`."""
    return time.perf_counter(), time.process_time()


def timed_enqueue(enqueue_one: Callable[[], Any], n: int) -> dict[str, Any]:
    """Enqueue ``n`` jobs one call (one commit) at a time."""
    started = enqueue_clocks()
    for _ in range(n):
        enqueue_one()
    return enqueue_result(n, started)


def timed_bulk(enqueue_batch: Callable[[int], Any], n: int, batch: int = BULK_BATCH) -> dict[str, Any]:
    """Enqueue ``n`` jobs in calls of ``batch`` jobs."""
    started = enqueue_clocks()
    done = 0
    while done < n:
        k = min(batch, n - done)
        enqueue_batch(k)
        done += k
    return enqueue_result(n, started, batch=batch)


def measure_drain(collector: Collector, proc: subprocess.Popen, n: int, timeout: float,
                  log_path: str, rss: bool = False) -> dict[str, Any]:
    """Wait until ``n`` jobs were handled; rate from the first handled job to the n-th.

    The worker tree's CPU time is sampled at the first handled job and at the n-th
    (bench/cpu_time.py): ``cpu_us_per_job`` is what the workers spent per job in that window.
    With ``rss`` the worker processes' VmRSS is sampled every 0.25 s.
    """
    samples: dict[int, list[int]] = {}
    stop = threading.Event()
    cpu_start: list[cpu_time.CpuSample] = []

    def cpu_sample() -> cpu_time.CpuSample:
        return cpu_time.sample_tree(proc.pid, collector.count, descendants)


    def sample() -> None:
        while not stop.is_set():
            if collector.first is None:  # growth is measured from the first handled job, not from boot
                stop.wait(0.02)
                continue
            for pid in [proc.pid, *descendants(proc.pid)]:
                kib = rss_kib(pid)
                if kib is not None:
                    samples.setdefault(pid, []).append(kib)
            stop.wait(0.25)

    collector.at_first(lambda: cpu_start.append(cpu_sample()))
    sampler = threading.Thread(target=sample, daemon=True) if rss else None
    if sampler:
        sampler.start()
    ok = collector.wait_for(n, timeout, alive=lambda: proc.poll() is None)
    cpu_end = cpu_sample() if ok else None
    stop.set()
    if sampler:
        sampler.join()
    if not ok:
        why = "workers exited" if proc.poll() is not None else f"timed out after {timeout:.0f}s"
        return {"error": f"{why} with {collector.count}/{n} jobs handled; log: "
                         + tail(log_path, 4).replace("\n", " | ")[-250:]}
    first, last = collector.first, collector.t_target or collector.last
    assert first is not None and last is not None
    if n > 1 and last <= first:
        # Every job arrived in one read of the FIFO (a bare SQLite loop drains 1,000 jobs in about 3 ms):
        # there is no duration to divide by, and 1e-6 s would print as a billion jobs/s.
        return {"error": f"too short to time: all {n} jobs were handled within one read of the FIFO "
                         "(about 1 ms); run more jobs"}
    dt = last - first if n > 1 else 1e-6
    out: dict[str, Any] = {"value": (n - 1) / dt if n > 1 else float("nan"), "unit": "jobs/s",
                           "seconds": round(dt, 4)}
    if cpu_start and cpu_end is not None:
        us = cpu_time.per_job_us(cpu_start[0], cpu_end)
        if us is not None:
            out["cpu_us_per_job"] = us
            out["cpu"] = {"seconds": round(cpu_end.seconds - cpu_start[0].seconds, 3),
                          "jobs": cpu_end.handled - cpu_start[0].handled,
                          "processes": len(set(cpu_start[0].pids) | set(cpu_end.pids))}
    if rss:
        out["rss_kib"] = {str(pid): {"first": v[0], "last": v[-1], "max": max(v), "samples": len(v)}
                          for pid, v in samples.items()}
    return out


def measure_latency(collector: Collector, proc: subprocess.Popen, enqueue_stamped: Callable[[float], Any],
                    samples: int, interval: float, log_path: str, boot_timeout: float = 60.0) -> dict[str, Any]:
    """Warm up with one job, then ``samples`` jobs stamped with time.time(), ``interval`` apart.

    Each job reports its stamp and when it started.  The pickup latency is measured from the
    moment the enqueue call returned (the job exists: it is committed or with the broker) to
    the moment the job started; the latency from the moment of the call, which adds the
    enqueue's own commit or round trip, is reported beside it (``call_*``).
    """
    enqueue_stamped(0.0)  # warm-up: boots the worker path end to end, not measured
    if not collector.wait_for(1, boot_timeout, alive=lambda: proc.poll() is None):
        return {"error": "the worker never handled the warm-up job; log: "
                         + tail(log_path, 4).replace("\n", " | ")[-250:]}
    time.sleep(0.3)  # let the worker go idle
    next_at = time.perf_counter()
    returned: dict[float, float] = {}
    for _ in range(samples):
        stamp = time.time()
        enqueue_stamped(stamp)
        returned[stamp] = time.time()
        next_at += interval
        pause = next_at - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
    if not collector.wait_for(1 + samples, 30.0, alive=lambda: proc.poll() is None):
        return {"error": f"only {len(collector.starts)}/{samples} latency samples arrived; log: "
                         + tail(log_path, 4).replace("\n", " | ")[-250:]}
    lat = [started - returned[stamp] for stamp, started in collector.starts if stamp in returned]
    call = [started - stamp for stamp, started in collector.starts if stamp in returned]
    if len(lat) != samples:
        return {"error": f"{samples - len(lat)} latency samples carried a stamp the benchmark never sent"}
    return {"value": percentile(lat, 50) * 1000, "p50_ms": percentile(lat, 50) * 1000,
            "p99_ms": percentile(lat, 99) * 1000, "max_ms": max(lat) * 1000, "unit": "ms",
            "call_p50_ms": percentile(call, 50) * 1000, "call_p99_ms": percentile(call, 99) * 1000,
            "enqueue_p50_ms": percentile([r - s for s, r in returned.items()], 50) * 1000,
            "samples": len(lat)}


# ---------------------------------------------------------------------------- tiny Redis client


def redis_command(url: str, *args: str | int) -> Any:
    """One RESP command against redis://host:port/db (enough for SELECT/DBSIZE/FLUSHDB/INFO)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    db = int((parts.path or "/0").strip("/") or 0)
    with socket.create_connection((parts.hostname or "127.0.0.1", parts.port or 6379), timeout=10) as s:
        f = s.makefile("rb")

        def send(*cmd: str | int) -> Any:
            payload = f"*{len(cmd)}\r\n".encode()
            for c in cmd:
                b = str(c).encode()
                payload += b"$%d\r\n%s\r\n" % (len(b), b)
            s.sendall(payload)
            return _read_resp(f)

        send("SELECT", db)
        return send(*args)


def _read_resp(f: Any) -> Any:
    line = f.readline()
    kind, rest = line[:1], line[1:-2]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise RuntimeError(rest.decode())
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = f.read(n + 2)[:-2]
        return data.decode("utf-8", "replace")
    if kind == b"*":
        return [_read_resp(f) for _ in range(int(rest))]
    raise RuntimeError(f"unexpected RESP reply {line!r}")
