"""Where a worker's CPU per job goes, stage by stage, in one thread (issue 29).

    python bench/worker_stages.py --db-url sqlite:////tmp/stages.db [--jobs 20000] [--batch 500]

A whole drain's CPU per job (bench/run.py, bench/ab.py) mixes the worker's own Python with its
threads' hand-offs, the heartbeat, the supervisor and the benchmark's FIFO, and on a shared
machine it moves by a third between identical runs.  This builds one :class:`Worker` in-process,
with no thread started, fills the queue with no-op jobs and then, in the calling thread, repeats
what the worker's threads do to each batch: ``admission.take`` (the claim, ``ClaimedJob``, the
buffer's ``put``), the buffer's ``get``, ``Runners._run_one`` per job (checks, handler, payload
decode, ``RunOutcome``, ``Settling.record``) and ``settling.settle()`` (collect and the batched
DELETE).  Each stage is timed with ``time.thread_time``: this thread's CPU only, so the database
server is not in it and other processes' load moves it little.  Prints one JSON line, µs per job.
Nothing here asserts a timing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from errands import Errands
from errands.worker.runner import Worker
from errands.worker.settings import WorkerSettings

app = Errands("sqlite:///errands-stages-unset.db")


@app.job(name="bench.stage_noop")
def noop(stamp: float) -> None:
    """Nothing at all: the stages measure errands' own work around a job."""


def measure(url: str, jobs: int, batch: int) -> dict[str, float]:
    app.use_database(url)
    app.migrate()
    for start in range(0, jobs, 5000):
        app.enqueue_many([noop.prepare(0.0) for _ in range(min(5000, jobs - start))])
    worker = Worker(app, WorkerSettings(queues=["default"], concurrency=10, burst=True))
    app.store.dedicate_thread()
    worker.maintenance.register()
    clock, state = time.thread_time, worker.state
    spent = {"claim": 0.0, "hand_off": 0.0, "run": 0.0, "settle": 0.0}
    done = 0
    while True:
        t0 = clock()
        rows = worker.admission.take(batch)
        t1 = clock()
        spent["claim"] += t1 - t0
        if not rows:
            break
        taken = [state.work.get_nowait() for _ in rows]
        t2 = clock()
        spent["hand_off"] += t2 - t1
        run_one = worker.runners._run_one
        for row in taken:
            run_one(0, row)
        t3 = clock()
        spent["run"] += t3 - t2
        worker.settling.settle()
        spent["settle"] += clock() - t3
        done += len(rows)
    worker.store.workers.unregister(worker.id)
    app.store.close()
    result = {f"{k}_us_per_job": round(v / done * 1e6, 2) for k, v in spent.items()}
    result["total_us_per_job"] = round(sum(spent.values()) / done * 1e6, 2)
    result["jobs"] = done
    result["load_average"] = round(os.getloadavg()[0], 1)
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--db-url", required=True, help="an empty database (SQLite file, PostgreSQL or MariaDB)")
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--batch", type=int, default=500, help="jobs per claim (a -c 10 worker's: 10 + 500 prefetch)")
    args = ap.parse_args()
    print(json.dumps(measure(args.db_url, args.jobs, args.batch)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
