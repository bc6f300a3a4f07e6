"""``python enqueue_unique.py URL KEY COUNT START_AT``: enqueue one job under KEY, COUNT times.

Started eight times at once by the unique-jobs test; each process waits until
START_AT (a time.time() value) so that they all hammer the unique index together.
Prints the distinct ids it got back.
"""

from __future__ import annotations

import sys
import time

from errands import Errands

url, key, count, start_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
app = Errands(url)


@app.job(name="once")
def once() -> None: ...


time.sleep(max(0.0, start_at - time.time()))
ids = {once.using(unique_key=key).enqueue().id for _ in range(count)}
print(" ".join(str(i) for i in sorted(ids)))
