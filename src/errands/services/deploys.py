"""What a worker about to start should know about the jobs waiting for it: names it does not register.

A job runs only where its name is registered.  Jobs enqueued under a name the starting worker's app
does not have (a script's ``__main__`` jobs, an app loaded under another module path than the code
that enqueued, the next release's new jobs during a rolling deploy) are held back by the worker for
the app's ``unknown_job_grace`` and then buried as ``errands.UnknownJob``: ``errands worker`` and
``manage.py errands_worker`` say so at start, naming them, instead of leaving it to the dead letter.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..app import Errands

SHOWN = 10
"""Names a warning lists at most."""


def unregistered_waiting(app: Errands, queues: Sequence[str]) -> list[str]:
    """Names of jobs waiting in ``queues`` (the next 10,000 of each) that ``app`` does not register."""
    return sorted(app.store.insights.waiting_job_names(queues) - set(app.registry))


def unregistered_warning(app: Errands, names: Sequence[str]) -> str:
    """The start-up warning about ``names``, with what usually causes it and what happens to the jobs."""
    shown = ", ".join(names[:SHOWN]) + (f" and {len(names) - SHOWN} more" if len(names) > SHOWN else "")
    hints = []
    if any(name.startswith("__main__.") for name in names):
        hints.append("a name starting with __main__. was enqueued by a script run directly: give the job "
                     "name=\"...\" in @app.job, or enqueue from a module the worker imports too")
    registered = set(app.registry)
    moved = [name for name in names if any(own.endswith("." + name) or name.endswith("." + own)
                                           for own in registered)]
    if moved:
        hints.append(f"{moved[0]} differs from a registered name only by its module path: load the app under "
                     "the module path the enqueuing code uses, or name the job explicitly")
    return (f"warning: jobs waiting in these queues have names this app does not register: {shown}. "
            f"A worker holds such a job back for {app.unknown_job_grace:g}s after its enqueue (for a worker "
            "that registers it: a rolling deploy), then moves it to the dead letter as errands.UnknownJob."
            + "".join(f"\n  hint: {hint}" for hint in hints))
