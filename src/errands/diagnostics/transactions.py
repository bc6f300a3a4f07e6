"""``errands doctor``'s open_transactions check: a long transaction elsewhere in errands' database.

Every job leaves dead row versions behind (inserted, updated, deleted).  The database removes
them only once no transaction that began before they died is still open, so one session left
``idle in transaction`` (a stuck migration, an analyst's open psql) pins them all: claims walk
past ever more dead entries of the claim index and the jobs table grows.  Measured at 1,000
jobs/s on PostgreSQL (issue 29): the claim went from ~0.02 ms to 13–24 ms in 3 minutes, the
table from 2 to 61 MB, and both recovered at once when the transaction ended.

The sessions come from the store dialect's ``open_transactions_sql`` (also behind
``errands_oldest_transaction_seconds`` in ``/metrics``); what else holds cleanup back
(PostgreSQL's replication slots, InnoDB's history list) and how to end a session come from
the dialect's diagnostics module (``HELD_BACK_SQL``, ``END_TRANSACTION``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

from ..core.errors import StoreError, StoreUnavailable
from ..store.driver import fetch_rows
from .model import Check, Status, age_text

if TYPE_CHECKING:
    from .context import DoctorContext


class HeldBackFacts(Protocol):
    """What this check reads from a dialect's diagnostics module (part of ``checks.DialectFacts``)."""

    HELD_BACK_SQL: str | None
    END_TRANSACTION: Mapping[str, str]

OPEN_TRANSACTION_WARN_SECONDS = 300.0
"""Warn about a transaction open longer than this (errands' own last milliseconds)."""
LISTED = 5
"""How many of the oldest transactions the check names."""
COSTS = ("the database cannot clean up the job rows that died since it began, so every claim rescans more "
         "dead index entries and the jobs table grows until it ends")


_WHO = {"session": "pid {}", "thread": "thread {}", "prepared": "prepared transaction '{}'"}
"""How each ``kind`` of row names itself (a PostgreSQL backend, a MySQL thread, a prepared transaction)."""


def _describe(row: dict[str, Any]) -> str:
    """One transaction as a line: who, how old, doing what (every field is the server's, shown as text)."""
    who = _WHO.get(row["kind"], "{}").format(row["id"])
    parts = [f"{who}: {row['state'] or 'state hidden'} for {age_text(row['age_seconds'])}"]
    if row["application"]:
        parts.append(f"{'user' if row['kind'] == 'thread' else 'application'} {row['application']!r}")
    if row["client"]:
        parts.append(f"client {row['client']}")
    if row["query"]:
        parts.append(f"query {' '.join(str(row['query']).split())!r}")
    return ", ".join(parts)


def _held_back(ctx: DoctorContext, facts: HeldBackFacts) -> list[dict[str, Any]]:
    """What else holds cleanup back (replication slots, InnoDB's history list), where readable."""
    if facts.HELD_BACK_SQL is None:
        return []
    sql = facts.HELD_BACK_SQL
    try:
        return ctx.read(lambda cur: (cur.execute(sql), fetch_rows(cur))[1])
    except StoreUnavailable:
        raise
    except StoreError:  # (INNODB_METRICS needs PROCESS too; the sessions are what matters)
        return []


def open_transactions(ctx: DoctorContext, facts: HeldBackFacts, *, warn_seconds: float | None = None) -> Check:
    """The oldest open transactions in errands' database other than errands' own and this check's:
    OK under ``warn_seconds`` (default :data:`OPEN_TRANSACTION_WARN_SECONDS`), WARN over it."""
    limit = OPEN_TRANSACTION_WARN_SECONDS if warn_seconds is None else warn_seconds
    sql = ctx.store.dialect.open_transactions_sql
    if sql is None:
        return Check("open_transactions", Status.INFO, "SQLite: no concurrent snapshot can hold back its cleanup "
                     "(a writer waits for readers only at a checkpoint; see sqlite_journal)")
    try:
        rows = ctx.read(lambda cur: (cur.execute(sql, (LISTED,)), fetch_rows(cur))[1])
    except StoreUnavailable:
        raise
    except StoreError as exc:  # e.g. MySQL's INNODB_TRX needs the PROCESS privilege
        return Check("open_transactions", Status.INFO, "not checked: this database user may not read the server's "
                     f"open transactions ({' '.join(str(exc).split())}); grant it PROCESS (MySQL/MariaDB) or "
                     "pg_read_all_stats (PostgreSQL) to have them checked")
    for row in rows:
        row["age_seconds"] = float(row["age_seconds"] or 0.0)
    held = _held_back(ctx, facts)
    data = {"warn_seconds": limit, "transactions": rows, "held_back": held,
            "oldest_seconds": rows[0]["age_seconds"] if rows else None}
    extra = tuple(str(h["detail"]) for h in held)
    stuck = [h for h in held if h.get("stuck")]
    old = [r for r in rows if r["age_seconds"] >= limit]
    if old:
        first = old[0]
        return Check("open_transactions", Status.WARN,
                     f"a transaction has been open for {age_text(first['age_seconds'])} (over "
                     f"{age_text(limit)}): {COSTS}", items=tuple(_describe(r) for r in old) + extra,
                     fix=facts.END_TRANSACTION.get(first["kind"], "").format(id=first["id"]) or None, data=data)
    if stuck:
        return Check("open_transactions", Status.WARN, f"{stuck[0]['detail']}: {COSTS}", items=extra,
                     fix=facts.END_TRANSACTION.get("slot"), data=data)
    oldest = f"the oldest other transaction is {age_text(rows[0]['age_seconds'])} old" if rows else \
        "no other transaction is open"
    return Check("open_transactions", Status.OK, f"no transaction open over {age_text(limit)} in this database "
                 f"besides errands' own ({oldest})", items=extra, data=data)
