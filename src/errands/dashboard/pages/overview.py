"""The overview: totals, queues, throughput."""

from __future__ import annotations

from functools import partial
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from ...services import operator as ops
from ...services.models import Overview
from ..auth import Principal
from ..rendering import Dashboard, Drawn


async def overview_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """The overview over a window (an unknown window is the last hour, as the page's links give)."""
    window = request.query_params.get("window", "1h")
    if window not in ops.WINDOWS:
        window = "1h"
    entry = await d.read_model(request, ("overview", window), partial(ops.overview, d.app, window))
    root = request.scope.get("root_path", "")
    drawn = entry.fragment(f"overview:{root}", partial(_drawn, d, root, window))
    return d.render(request, "overview.html", user, data=entry.value, window=window, drawn=drawn)


def _drawn(d: Dashboard, root: str, window: str, data: Overview) -> Drawn:
    """The page's content (counters, chart, queues: no form, nothing of the user's), drawn once per
    cached overview; the frame around it (the user, the banners, the CSRF token) is drawn per request."""
    parts: Any = d.env.get_template("overview_parts.html").make_module({"root": root})  # its macros
    return Drawn(parts.main(data, window, list(ops.WINDOWS)))
