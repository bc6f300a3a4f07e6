"""Jobs for the browser tests: quick ones to watch counters move, and one that fails until fixed."""

from __future__ import annotations

import os
import time

from errands import Errands

app = Errands()


@app.job(name="quick", queue="default")
def quick(n: int | str) -> None:  # a str too: the bidi test shows tricky text as its argument
    time.sleep(0.05)


@app.job(name="fixable", queue="default", max_attempts=1)
def fixable(flag_file: str) -> None:
    """Fails until the test creates ``flag_file`` (then a retry from the dead letter succeeds)."""
    if not os.path.exists(flag_file):
        raise RuntimeError(f"<b>not fixed yet</b>: {flag_file} is missing")
