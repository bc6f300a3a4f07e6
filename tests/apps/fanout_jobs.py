"""Jobs that enqueue a follow-up, as in issue 13: the runner threads reach the database through errands.

``fan_out`` enqueues a ``leaf``, notes that it is running in the directory ERRANDS_TEST_NOTES
(a file per job: the test waits for them, never for a fixed time), then holds its slot until the
file ``release`` appears there, so that every runner thread has used the database at once
while the test counts the server's connections.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from errands import Errands, current_job

app = Errands()


@app.job(name="leaf", queue="default")
def leaf() -> None:
    """The follow-up: nothing to do."""


@app.job(name="fan_out", queue="default")
def fan_out() -> None:
    leaf.enqueue()
    notes = Path(os.environ["ERRANDS_TEST_NOTES"])
    (notes / f"running-{current_job().id}").touch()
    deadline = time.monotonic() + 120
    while not (notes / "release").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
