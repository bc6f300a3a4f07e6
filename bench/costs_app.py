"""errands_app with statement counting (bench/stmt_count.py): the app bench/costs.py's workers load.

``errands --app costs_app:app``: the same no-op job as the timed benchmark; every statement the
worker processes send is counted into ``BENCH_STATEMENTS``.
"""

from __future__ import annotations

import stmt_count

stmt_count.install()

from errands_app import app, noop, sleepy  # noqa: E402

__all__ = ["app", "noop", "sleepy"]
