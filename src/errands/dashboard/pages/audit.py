"""The audit log: who did what."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response

from ...services import operator as ops
from .. import params
from ..auth import Principal
from ..rendering import Dashboard


async def audit_page(d: Dashboard, request: Request, user: Principal) -> Response:
    """A page of the audit log, newest first."""
    entries = await run_in_threadpool(ops.audit_view, d.app, params.query_int(request, "before"))
    return d.render(request, "audit.html", user, entries=entries)
