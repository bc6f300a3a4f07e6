"""Reading a request's query parameters, path parameters and form fields: every number checked
against the range of what it names, every filter checked as text, a 400 for anything else."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request

from ..core.config import check_queue_name
from ..core.errors import ErrandsError, InvalidQueueName
from ..core.limits import ID_MAX, MAX_DELAY
from ..core.payload import safe_text
from ..services import operator as ops

PAGE_SIZE = 50
BULK_CAP = 100_000
INTEGER = re.compile(r"[+-]?[0-9]{1,40}")


def integer(value: Any, name: str, low: int = 1, high: int = ID_MAX) -> int | None:
    """An integer from a URL or a form, checked against the range of what it names (by default a
    job id, 1..ID_MAX: a bigger number is no id any backend holds, and fails the driver); None
    when absent; a 400 for anything else."""
    if value in (None, ""):
        return None
    text = str(value).strip()
    if not INTEGER.fullmatch(text) or not low <= int(text) <= high:
        raise HTTPException(400, f"{name} must be an integer from {low} to {high}")
    return int(text)


def query_int(request: Request, name: str) -> int | None:
    """A keyset bound (``before``, ``after``) of the query: a job id or nothing."""
    return integer(request.query_params.get(name), name)


def job_id(request: Request) -> int:
    """The job id of the URL's path."""
    return integer(request.path_params["job_id"], "job id") or 0


def workflow_id(request: Request) -> int:
    """The workflow (chain, batch) id of the URL's path."""
    return integer(request.path_params["workflow_id"], "workflow id") or 0


def delay_field(value: str) -> float | None:
    """The enqueue form's delay: empty, or 0 to MAX_DELAY seconds (ValueError otherwise)."""
    if not value.strip():
        return None
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_DELAY:  # NaN and the infinities fail this too
        raise ValueError(f"delay must be a number of seconds from 0 to {MAX_DELAY:.0f} (ten years), got {value!r}")
    return seconds


def checked_queue(name: str) -> str:
    """A queue name from a URL path, refused with a 400 unless it is one (see config.check_queue_name)."""
    try:
        return check_queue_name(name)
    except InvalidQueueName as exc:
        raise HTTPException(400, str(exc)) from None


def job_filter(params: Any) -> ops.JobFilter:
    """The job filter of a query, a form or a JSON body (queue, state, name, q or text)."""
    def text(*keys: str) -> str | None:
        for key in keys:
            value = params.get(key)
            if value:
                if not isinstance(value, str):  # a file in a form, a number in a JSON body
                    raise HTTPException(400, f"{key} must be text")
                return safe_text(value)  # a NUL (which PostgreSQL refuses) matches nothing, like any text
        return None

    try:
        return ops.JobFilter(text("queue"), text("state"), text("name"), text("q", "text")).check()
    except ErrandsError as exc:
        raise HTTPException(400, str(exc)) from None


def sort(params: Any) -> str:
    """The job list's order (one of ``ops.SORTS``, newest by default)."""
    value = params.get("sort") or "newest"
    if value not in ops.SORTS:
        raise HTTPException(400, f"sort must be one of {', '.join(ops.SORTS)}")
    return str(value)


def bulk_ids(body: dict[str, Any], matching: Callable[[ops.JobFilter], list[int]]) -> list[int]:
    """The dead-letter ids of an API bulk action: the body's ``ids``, or those ``matching`` its filter."""
    ids = body.get("ids")
    if ids is None:
        ids = matching(job_filter({k: body.get(k) for k in ("queue", "name", "text")}))[:BULK_CAP]
    if not isinstance(ids, list) or not all(type(i) is int and 1 <= i <= ID_MAX for i in ids):
        raise HTTPException(400, f"ids must be a list of job ids (integers from 1 to {ID_MAX})")
    return ids
