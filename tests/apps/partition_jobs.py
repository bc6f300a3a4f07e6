"""Jobs for the partition test: each run appends "job_id pid" to the file ERRANDS_TEST_RUNS names.

Runs are recorded outside the database on purpose: a host cut off from the database still runs
the jobs it holds, and those runs must be counted too."""

from __future__ import annotations

import os
import time

from errands import Errands, current_job

app = Errands(lease=float(os.environ.get("ERRANDS_TEST_LEASE", "30")))


@app.job(queue="default", max_attempts=10)
def work(n: int) -> None:
    time.sleep(0.02)
    line = f"{current_job().id} {os.getpid()}\n".encode()
    fd = os.open(os.environ["ERRANDS_TEST_RUNS"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)  # one write of a short line with O_APPEND: lines never interleave
    finally:
        os.close(fd)
