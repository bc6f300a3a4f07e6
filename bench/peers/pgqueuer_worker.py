"""``python pgqueuer_worker.py BATCH_SIZE continuous|drain``: what ``pgq run`` does, at log level WARNING.

pgqueuer 1.6.0's ``pgq run`` fails at start-up with the typer release pip
resolves today (``setup_fancy_logger`` receives a str: AttributeError: 'str'
object has no attribute 'name'), with or without ``--log-level``.  This calls the
same supervisor (``pgqueuer.run``) on uvloop, as ``pgq run`` would.
"""

from __future__ import annotations

import sys

import uvloop


from pgqueuer import run
from pgqueuer.core import logconfig
from pgqueuer.domain.types import QueueExecutionMode

if __name__ == "__main__":
    logconfig.setup_fancy_logger(logconfig.LogLevel.WARNING)
    uvloop.run(run("pgqueuer_app:create", batch_size=int(sys.argv[1]), mode=QueueExecutionMode[sys.argv[2]]))
