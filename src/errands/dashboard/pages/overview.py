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
    drawn = entry.fragment(f"overview:{root}", partial(_parts, d, root))
    return d.render(request, "overview.html", user, data=entry.value, window=window, windows=list(ops.WINDOWS),
                    drawn=drawn)


def _parts(d: Dashboard, root: str, data: Overview) -> dict[str, Drawn]:
    """The chart and the queue table, the same for everyone: drawn once per cached overview."""
    parts: Any = d.env.get_template("overview_parts.html").make_module({"root": root})  # its macros
    return {"chart": Drawn(parts.chart(data)), "queues": Drawn(parts.queues(data))}
