"""The application bench/dashboard_load.py serves: bench/dashboard_pages.py's eleven jobs and two
schedules (so the dashboard knows the names the filled database holds), plus ``bench.trickle`` on a
queue of its own, which the live ``errands worker`` drains while the pages are under load.

``errands --app dashboard_load_app:app`` (bench/ on ``PYTHONPATH``) with ``ERRANDS_DATABASE_URL``.
When the command runs another source tree (``--src base=...``), ``errands`` is imported from that
tree first (``python -m errands``), so the path dashboard_pages adds later changes nothing.
"""

from __future__ import annotations

import os

import dashboard_pages

from errands import Errands

TRICKLE_QUEUE = "trickle"


def make(url: str) -> Errands:
    """The bench's application on ``url``, with the trickle job."""
    app = dashboard_pages.build_app(url)

    @app.job(name="bench.trickle", queue=TRICKLE_QUEUE)
    def trickle(n: int) -> None:
        """A job of the steady trickle the live worker runs (it does nothing)."""

    return app


app = make(os.environ.get("ERRANDS_DATABASE_URL", "sqlite:///errands-bench-unset.db"))
