"""``python enqueue_unique.py URL KEY COUNT GATE_DIR [UNIQUE_FOR]``: enqueue one job under KEY, COUNT times
(with a unique period of UNIQUE_FOR seconds when given).

Started eight times at once by the unique-jobs test; each process says it is ready (the file
GATE_DIR/ready-<pid>) and waits for the test's go (GATE_DIR/go), so that they all hammer the
unique index together however long each took to start.  Prints the distinct ids it got back.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from errands import Errands

url, key, count, gate = sys.argv[1], sys.argv[2], int(sys.argv[3]), Path(sys.argv[4])
period = float(sys.argv[5]) if len(sys.argv) > 5 else None
app = Errands(url)


@app.job(name="once")
def once() -> None: ...


(gate / f"ready-{os.getpid()}").touch()
deadline = time.monotonic() + 120 * float(os.environ.get("ERRANDS_TEST_TIME_SCALE") or 1)  # as helpers.scaled
while not (gate / "go").exists():
    if time.monotonic() > deadline:
        sys.exit("the test never said go")
    time.sleep(0.001)
ids = {once.using(unique_key=key, unique_for=period).enqueue().id for _ in range(count)}
print(" ".join(str(i) for i in sorted(ids)))
