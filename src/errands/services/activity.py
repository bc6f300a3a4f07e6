"""What is happening now, from rows the database already has: throughput per queue (the per-minute
stats workers write every few seconds) and the worker activity feed (what each worker runs now, the
newest kept outcomes and failed attempts).  Nothing here asks a worker to write more: the feed reads
the leases, the results table and the error history, each through an index and a LIMIT."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from .models import FailedAttempt, Outcome, RunningNow, Throughput, WorkerActivity, WorkerActivityRow
from .operator import bucket_window, worker_registry

if TYPE_CHECKING:
    from ..app import Errands


def queue_throughput(app: Errands, window: str, queue: str | None = None,
                     now: datetime | None = None) -> dict[str, Throughput]:
    """Jobs succeeded and failed per bucket over ``window`` (one of WINDOWS), per queue that ran any
    (or for ``queue`` alone, even when it ran none)."""
    store = app.reads
    start, step, buckets = bucket_window(window, now or store.now())
    series: dict[str, tuple[list[int], list[int]]] = {}
    if queue is not None:
        series[queue] = ([0] * buckets, [0] * buckets)
    for name, index, ok, bad in store.insights.queue_throughput_buckets(start, step, queue):
        ok_list, bad_list = series.setdefault(name, ([0] * buckets, [0] * buckets))
        if 0 <= index < buckets:
            ok_list[index] += ok
            bad_list[index] += bad
    return {name: Throughput(window, step, start.isoformat(), ok_list, bad_list, sum(ok_list), sum(bad_list))
            for name, (ok_list, bad_list) in sorted(series.items())}


RUNNING_SHOWN = 20
"""Jobs listed per worker in the feed (the count says how many it holds)."""
HELD_READ = 500
"""Held jobs the feed reads at most, over every worker (one read through the lease index)."""
FEED = 20
"""Failed attempts and kept outcomes the feed shows."""


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


def worker_activity(app: Errands, now: datetime | None = None) -> WorkerActivity:
    """What each worker runs now (job, name, since), and the newest failed attempts and kept
    outcomes: four bounded reads (the registry, the leases, the error history, the results), from
    ``app.reads`` (the read replica when there is one and it is close enough)."""
    store = app.reads
    now = now or store.now()
    held: dict[str, list[RunningNow]] = {}
    for owner, job_id, name, queue, since, until, progress in store.insights.running_now(HELD_READ):
        seconds = None if since is None else round(max((now - since).total_seconds(), 0.0), 1)
        held.setdefault(owner, []).append(RunningNow(job_id, name, queue, _iso(since), seconds,
                                                     progress, until < now))
    for jobs in held.values():
        jobs.sort(key=lambda j: j.since or "")
    workers = [WorkerActivityRow(w.id, w.hostname, w.alive, w.jobs_done, held.get(w.id, [])[:RUNNING_SHOWN],
                                 len(held.get(w.id, []))) for w in worker_registry(app, now)]
    known = {w.id for w in workers}
    orphans = [j for owner, jobs in sorted(held.items()) if owner not in known for j in jobs][:RUNNING_SHOWN]
    failures = [FailedAttempt(job_id, attempt, at.isoformat(), error_type, message, name, queue)
                for job_id, attempt, at, error_type, message, name, queue in store.insights.recent_failures(FEED)]
    outcomes = [Outcome(job_id, name, queue, state, at.isoformat(), message)
                for job_id, name, queue, state, at, message in store.insights.recent_outcomes(FEED)]
    return WorkerActivity(now.isoformat(), workers, orphans, failures, outcomes)


__all__ = ["RUNNING_SHOWN", "queue_throughput", "worker_activity"]
