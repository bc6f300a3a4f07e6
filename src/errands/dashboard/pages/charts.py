"""Throughput charts as fragments: the overview's live chart (and any queue's) drawn again on the
server for the page's script to swap in, so the browser never needs a chart library."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from ...services import activity
from ...services import operator as ops
from .. import params
from ..auth import Principal
from ..charts import throughput_chart
from ..rendering import Dashboard


def window_of(request: Request) -> str:
    """The query's window (one of ``ops.WINDOWS``; the last hour when absent)."""
    window = request.query_params.get("window") or "1h"
    if window not in ops.WINDOWS:
        raise HTTPException(400, f"window must be one of {', '.join(ops.WINDOWS)}")
    return window


async def throughput_fragment(d: Dashboard, request: Request, user: Principal) -> Response:
    """``/charts/throughput?window=1h[&queue=name]``: the chart's SVG alone."""
    window = window_of(request)
    queue = request.query_params.get("queue")
    if queue:
        name = params.checked_queue(queue)
        series = (await run_in_threadpool(activity.queue_throughput, d.app, window, name))[name]
    else:
        series = await run_in_threadpool(ops.throughput, d.app, window)
    macro = d.env.get_template("chart.html").module.throughput  # type: ignore[attr-defined]
    return HTMLResponse(str(macro(throughput_chart(series), "tp-" + (queue or "all"))))
