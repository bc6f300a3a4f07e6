"""``python enqueue_debounced.py URL TAG COUNT GATE_DIR``: enqueue the debounced job ``debounced(TAG, i)``
for i in 0..COUNT-1, as one process of a burst.

Started four times at once by the debounce test; each process says it is ready (the file
GATE_DIR/ready-<pid>) and waits for the test's go (GATE_DIR/go), so that the four bursts overlap
however long each took to start.  Prints the distinct ids it got back.  The quiet period (60 s) is
longer than any pause of a busy machine between two enqueues, so the burst is one burst.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from errands import Errands

url, tag, count, gate = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
app = Errands(url)


@app.job(name="debounced", unique_key="burst", debounce=60, max_wait=3600)
def debounced(tag: str, i: int) -> None: ...


(gate / f"ready-{os.getpid()}").touch()
deadline = time.monotonic() + 120 * float(os.environ.get("ERRANDS_TEST_TIME_SCALE") or 1)  # as helpers.scaled
while not (gate / "go").exists():
    if time.monotonic() > deadline:
        sys.exit("the test never said go")
    time.sleep(0.001)
ids = {debounced.enqueue(tag, i).id for i in range(count)}
print(" ".join(str(i) for i in sorted(ids)))
