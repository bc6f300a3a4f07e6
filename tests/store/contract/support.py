"""Small builders and raw reads shared by the contract's tests."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import pytest

from errands.core.columns import Column, names
from errands.core.retry import DEFAULT_POLICY, JobPolicy
from errands.core.rows import ClaimedJob, NewJob
from errands.store import Store
from errands.store.driver import fetch_rows

PAYLOAD = '{"args":[],"kwargs":{}}'
OWNER = "contract-host:1:aaaaaa"
OTHER = "contract-host:2:bbbbbb"
SLACK = timedelta(milliseconds=2)
"""How far two readings of the same moment may differ: SQLite keeps times as REAL seconds computed
from a Julian day (tens of microseconds of rounding), the others keep microseconds."""


def job(name: str = "contract.job", queue: str = "default", **fields: Any) -> NewJob:
    return NewJob(name, queue, fields.pop("payload", PAYLOAD), **fields)


def enqueue(store: Store, count: int = 1, **fields: Any) -> list[int]:
    return store.jobs.enqueue([job(**fields) for _ in range(count)])


def claim(store: Store, owner: str = OWNER, queues: Sequence[str] = ("default",), limit: int = 100,
          lease: float = 30.0) -> list[ClaimedJob]:
    return store.jobs.claim(owner, list(queues), limit, lease)


def claim_ids(store: Store, owner: str = OWNER, queues: Sequence[str] = ("default",), limit: int = 100,
              lease: float = 30.0) -> list[int]:
    return [c.id for c in claim(store, owner, queues, limit, lease)]


class Policies:
    """The app's side of ``PolicyLookup``: every job comes back at once, records kept a minute."""

    def __init__(self, record_ttl: float = 60.0) -> None:
        self.record_ttl = record_ttl

    def policy_of(self, name: str) -> JobPolicy:
        return JobPolicy(None, DEFAULT_POLICY, self.record_ttl, self.record_ttl, False)


def rows(store: Store, template: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
    """The rows of a statement template (``{jobs}``, ``{p}``...), read raw, by column name."""

    def read(cur: Any) -> list[dict[str, Any]]:
        cur.execute(store.dialect.q(template), list(params))
        return fetch_rows(cur)

    return store.db.run(read)


def raw(store: Store, table: str, columns: Sequence[Column], job_id: int) -> dict[str, Any] | None:
    """A row of ``table`` (``"jobs"`` or ``"failed"``) as stored: ``columns`` by name, undecoded."""
    found = rows(store, "SELECT " + names(tuple(columns)) + " FROM {" + table + "} WHERE id = {p}", [job_id])
    return found[0] if found else None


def count(store: Store, table: str, where: str = "", params: Sequence[Any] = ()) -> int:
    found = rows(store, "SELECT COUNT(*) AS n FROM {" + table + "}" + (" WHERE " + where if where else ""), params)
    return int(found[0]["n"])


def within(value: datetime | None, low: datetime, high: datetime, slack: timedelta = SLACK) -> bool:
    """``low <= value <= high`` give or take the clock's rounding."""
    return value is not None and low - slack <= value <= high + slack


def near(value: datetime | None, expected: datetime, slack: timedelta = SLACK) -> bool:
    return within(value, expected, expected, slack)


def xfail_on(request: pytest.FixtureRequest, backend: str, failing: Sequence[str], reason: str) -> None:
    """Mark this test ``xfail(strict=True)`` on the ``failing`` backends only: a contract failure written
    down for the coordinator (the test keeps its full strength everywhere, and turns red on those
    backends the moment the code is fixed, so the mark is removed with the fix)."""
    if backend in failing:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
