"""Operator tools over many jobs or any job: find a job by its id wherever it is, and act on every
waiting job a filter matches (cancel, move to another queue, re-prioritise), in two steps: count,
then confirm.  Every action is audited with who took it."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..core.config import check_queue_name
from ..core.errors import InvalidOption, InvalidQueueName
from ..core.jobs import PRIORITY_RANGE
from ..core.limits import ID_MAX
from ..store.insights import COUNT_CAP, SEARCH_WINDOW
from ..store.operations import ACTIONS, CHUNK
from .models import BulkJobsDone, BulkPlan, FoundJob
from .operator import JobFilter

if TYPE_CHECKING:
    from ..app import Errands

BULK_JOBS_CAP = 100_000
"""Most waiting jobs one bulk action changes: run it again for more."""
BULK_COUNT_CAP = COUNT_CAP
"""Where the confirmation's count stops ("10,000+", as the jobs page counts): a count is a read of
that many rows at most when they are dense, whatever the table holds."""
WAITING_STATES = ("ready", "delayed", "blocked")
"""The states a bulk action may filter on: it acts on waiting jobs only."""
_ID_TEXT = re.compile(r"#?\s*([0-9][0-9,_ ]{0,40})")
ACTION_WORDS = {"cancel": "cancelled", "move": "moved", "priority": "re-prioritised"}


# ---------------------------------------------------------------------------------- find a job
def parse_job_id(text: Any) -> int:
    """A job id as people type it ("123", "#123", "1,234"), or InvalidOption saying what an id is."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidOption("type a job id: a whole number such as 1234")
    match = _ID_TEXT.fullmatch(text.strip())
    digits = re.sub(r"[,_ ]", "", match.group(1)) if match else ""
    if not digits or not 1 <= int(digits) <= ID_MAX:
        shown = text.strip()[:40]
        raise InvalidOption(f"{shown!r} is no job id: a job id is a whole number from 1 to {ID_MAX}")
    return int(digits)


def find_job(app: Errands, text: Any) -> FoundJob | None:
    """Where the job ``text`` names is: waiting or running ("jobs"), in the dead letter ("dead") or
    ended with a kept result ("results"); None when no table holds it.  Three primary-key lookups
    at most, on every backend."""
    job_id = parse_job_id(text)
    store = app.store
    row = store.jobs.get_job(job_id)
    if row is not None:
        return FoundJob(job_id, "jobs", row.state(store.now()).value, f"/jobs/{job_id}")
    if store.jobs.get_failed(job_id) is not None:
        return FoundJob(job_id, "dead", "failed", f"/jobs/{job_id}")
    result = store.features.get_result(job_id)
    if result is not None:
        return FoundJob(job_id, "results", result.state.value, f"/jobs/{job_id}")
    return None


def not_found_text(job_id: int) -> str:
    return (f"No job {job_id}: no waiting, running or dead job has that id, and no kept result either "
            "(it finished without keeping one, or never existed)")


# ---------------------------------------------------------------------------------- bulk actions
def bulk_filter(flt: JobFilter) -> dict[str, Any]:
    """The store's form of a bulk action's filter; refused when it names no waiting state."""
    flt.check()
    if flt.state and flt.state not in WAITING_STATES:
        raise InvalidOption(f"bulk actions change waiting jobs only: state must be one of "
                            f"{', '.join(WAITING_STATES)} (or any), not {flt.state!r}")
    return flt.args()


def bulk_target(action: Any, queue: Any = None, priority: Any = None) -> tuple[str, str | None, int | None]:
    """The action and what it sets, checked: a valid queue to move to, a 32-bit priority."""
    if action not in ACTIONS:
        raise InvalidOption(f"action must be one of {', '.join(ACTIONS)}")
    if action == "move":
        try:
            return action, check_queue_name(queue), None
        except InvalidQueueName as exc:
            raise InvalidOption(f"the queue to move to: {exc}") from None
    if action == "priority":
        if isinstance(priority, str) and re.fullmatch(r"[+-]?[0-9]{1,11}", priority.strip()):
            priority = int(priority.strip())
        if isinstance(priority, bool) or not isinstance(priority, int) \
                or not PRIORITY_RANGE[0] <= priority <= PRIORITY_RANGE[1]:
            raise InvalidOption(f"priority must be a whole number from {PRIORITY_RANGE[0]} to {PRIORITY_RANGE[1]}")
        return action, None, priority
    return action, None, None


def plan_bulk(app: Errands, action: str, flt: JobFilter, queue: str | None = None,
              priority: int | None = None) -> BulkPlan:
    """The first step: how many waiting jobs the action would change now (the count stops past
    BULK_COUNT_CAP), and the ids it may touch: up to ``upto``, the newest job now (jobs enqueued
    after the count are not part of what the operator confirmed), and from ``since``: a filter by
    job name or text (which no index serves) covers the newest SEARCH_WINDOW jobs, as the jobs page's
    search does, so neither the count nor the action reads the whole table for it."""
    where = bulk_filter(flt)
    store = app.store
    upto = store.jobs.highest_job_id() or 0
    since = (store.insights.scan_edge("jobs", rows=SEARCH_WINDOW) or 0) if flt.name or flt.text else 0
    count = store.operations.count_waiting(where, since, upto, BULK_COUNT_CAP) if upto else 0
    capped = count > BULK_COUNT_CAP
    count = min(count, BULK_COUNT_CAP)
    hint = (f"send confirm={count}, since={since} and upto={upto} to {action} "
            + (f"at least {count:,} waiting jobs (at most {BULK_JOBS_CAP:,} a call: run it again for the rest)"
               if capped else f"{count:,} waiting job(s)"))
    return BulkPlan(True, action, count, capped, since, upto, queue, priority, hint)


def run_bulk(app: Errands, actor: str, action: str, flt: JobFilter, upto: int, counted: int, *,
             since: int = 0, queue: str | None = None, priority: int | None = None,
             progress: Callable[[int], None] | None = None) -> BulkJobsDone:
    """The second step: do ``action`` to the waiting jobs that match ``flt`` now, with ids from
    ``since`` up to ``upto`` (at most BULK_JOBS_CAP, oldest first), window by window and CHUNK jobs a
    transaction (see :mod:`errands.store.operations`); audited.  ``counted`` is what the operator
    confirmed: the answer says how many were changed, fewer when jobs ran, ended or changed meanwhile."""
    where = bulk_filter(flt)
    for name, value in (("upto", upto), ("since", since)):
        if type(value) is not int or not 0 <= value <= ID_MAX:
            raise InvalidOption(f"{name} must be a job id (0 to {ID_MAX})")
    ops = app.store.operations
    done, after = 0, max(since - 1, 0)
    while done < BULK_JOBS_CAP and after < upto:
        edge = ops.window_edge(after, upto)
        if edge is None:
            break
        ids = ops.waiting_ids(where, after, edge)[:BULK_JOBS_CAP - done]
        for start in range(0, len(ids), CHUNK):
            changed = ops.apply(action, ids[start:start + CHUNK], where, queue=queue, priority=priority,
                                record_ttl=app.result_ttl, message=f"cancelled in bulk by {actor}")
            done += changed
            if progress is not None:
                progress(changed)
        after = edge
    _audit(app, actor, action, flt, done, counted, queue, priority)
    return BulkJobsDone(action, done, counted)


def _audit(app: Errands, actor: str, action: str, flt: JobFilter, done: int, counted: int, queue: str | None,
           priority: int | None) -> None:
    described = ", ".join(f"{k}={v}" for k, v in flt.args().items() if v) or "every waiting job"
    to = f" to queue {queue}" if action == "move" else f" to priority {priority}" if action == "priority" else ""
    app.store.accounts.audit(actor, f"bulk-{action}", f"jobs matching {described}"[:255],
                             f"{done} waiting jobs {ACTION_WORDS[action]}{to} ({counted} counted at confirmation)")


__all__ = ["BULK_COUNT_CAP", "BULK_JOBS_CAP", "WAITING_STATES", "bulk_filter", "bulk_target", "find_job",
           "not_found_text",
           "parse_job_id", "plan_bulk", "run_bulk"]
