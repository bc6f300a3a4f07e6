"""Jobs for the poison-input test (tests/robustness/test_poison_inputs.py).

``good`` notes each run in ``poison_runs`` (job id as primary key, so a second run of one job
fails loudly); the others fail in the ways a careless or hostile handler does.  The app reads
ERRANDS_DATABASE_URL like a user's app would.
"""

from __future__ import annotations

import sys

from errands import Errands, current_job

app = Errands(lease=30, unknown_job_grace=0)  # an unknown name is poison here, buried at once, not held back

RUNS_DDL = "CREATE TABLE IF NOT EXISTS poison_runs (job_id BIGINT PRIMARY KEY, note VARCHAR(100))"


@app.job(max_attempts=3)
def good(n: int, text: str = "") -> None:
    p = app.store.dialect.placeholder
    job_id = current_job().id
    app.store.db.run(lambda cur: cur.execute(f"INSERT INTO poison_runs (job_id, note) VALUES ({p}, {p})",
                                          (job_id, f"good {n}")))


@app.job(max_attempts=2, backoff=0)
def surrogate_error() -> None:
    """An exception message no driver can encode (bytes decoded with surrogateescape)."""
    raise ValueError(b"caf\xe9 \x00 au lait".decode("utf-8", "surrogateescape"))


class Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("this exception cannot be shown")


@app.job(max_attempts=2, backoff=0)
def unprintable_error() -> None:
    raise Unprintable()


@app.job(max_attempts=2, backoff=0)
def exits() -> None:
    """sys.exit() in a handler: a BaseException that must cost the run, never the runner thread."""
    sys.exit(3)


@app.job(keep_result=True)
def deep_result() -> object:
    """Returns a value nested too deeply for JSON: the run succeeds, its result is kept as null."""
    value: list[object] = []
    for _ in range(100_000):
        value = [value]
    return value
