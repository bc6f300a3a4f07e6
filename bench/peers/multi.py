"""``python multi.py N cmd...``: run N copies of a worker command as one process group.

For systems whose worker command runs a single process (PgQueuer's ``pgq run``,
procrastinate's ``procrastinate worker``).  Exits when every copy has exited;
SIGTERM/SIGINT are passed on to the copies.
"""

from __future__ import annotations

import signal
import subprocess
import sys


def main() -> None:
    n, cmd = int(sys.argv[1]), sys.argv[2:]
    procs = [subprocess.Popen(cmd) for _ in range(n)]

    def forward(signum: int, frame: object) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    codes = [p.wait() for p in procs]
    sys.exit(next((c for c in codes if c), 0))


if __name__ == "__main__":
    main()
