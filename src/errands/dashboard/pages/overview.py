"""The overview: totals, queues, throughput."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ...services import operator as ops
from ..auth import Principal
from ..rendering import Dashboard


async def overview_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The overview over a window (an unknown window is the last hour, as the page's links give)."""
    window = request.query_params.get("window", "1h")
    if window not in ops.WINDOWS:
        window = "1h"
    data = await run_in_threadpool(ops.overview, d.app, window)
    return d.render(request, "overview.html", user, data=data, window=window, windows=list(ops.WINDOWS))
