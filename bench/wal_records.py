"""Which WAL records make up a phase's bytes (issue 29 goal 2): ``bench/costs.py --wal-records``.

PostgreSQL's ``pg_walinspect`` (contrib, 15+) lists every record between two LSNs, server-wide.  The
records of one database are told apart by their block references (``rel <tablespace>/<database
oid>/<relfilenode>``); a commit record has none, so it counts when its transaction id wrote a record
of the database.  Everything else in the range (other databases, checkpoints, ``RUNNING_XACTS``) is
summed as "other, server-wide".  Each record counts its bytes in the WAL stream (its end LSN minus
its start: the 8-byte alignment included), and apart the full-page images it carries: those are
written for the first change of a page after a checkpoint, so a figure with many of them depends on
when the checkpoint fell (``full_page_writes``).  Measuring only.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

REL = re.compile(r"rel \d+/(\d+)/(\d+)")

#: The records of a phase, one query: start LSN as text, the record's type, its xid, its length
#: in the stream, its FPI bytes, its block references.
RECORDS_SQL = (
    "SELECT resource_manager, split_part(record_type, ' ', 1), xid::text::bigint, "
    "pg_wal_lsn_diff(end_lsn, start_lsn)::bigint, fpi_length, coalesce(block_ref, '') "
    "FROM pg_get_wal_records_info(%s::pg_lsn, %s::pg_lsn)")


def lsn(position: float) -> str:
    """``pg_wal_lsn_diff(lsn, '0/0')`` back to an LSN's text."""
    n = int(position)
    return f"{n >> 32:X}/{n & 0xFFFFFFFF:X}"


SLOT = "errands_bench_wal_records"
"""A physical replication slot held while a phase is measured, so that no checkpoint recycles the
segments its records are in before they are read (dropped right after)."""


def hold(conn: Any) -> None:
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (SLOT,))
    conn.execute("SELECT pg_create_physical_replication_slot(%s, true)", (SLOT,))


def release(conn: Any) -> None:
    conn.execute("SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = %s",
                 (SLOT,))


def prepare(conn: Any) -> tuple[int, dict[int, str]]:
    """Make ``pg_walinspect`` in the (fresh) database ``conn`` is connected to; its oid and its relations by
    relfilenode (read before the phases: a relation keeps its relfilenode unless rewritten)."""
    conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    oid = int(conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()[0])
    names = {int(node): name for node, name in conn.execute(
        "SELECT relfilenode, relname FROM pg_class WHERE relfilenode <> 0 AND relnamespace <> "
        "'pg_catalog'::regnamespace AND relnamespace <> 'information_schema'::regnamespace").fetchall()}
    return oid, names


def breakdown(conn: Any, start: float, end: float, oid: int, names: dict[int, str]) -> list[dict[str, Any]]:
    """The records between two positions, grouped by (resource manager, record type, relation)."""
    rows = conn.execute(RECORDS_SQL, (lsn(start), lsn(end))).fetchall()
    ours: set[int] = set()
    keyed: list[tuple[tuple[str, str, str], int, int, int]] = []
    for rmgr, rtype, xid, length, fpi, refs in rows:
        rels = [(int(d), int(node)) for d, node in REL.findall(refs)]
        mine = [node for d, node in rels if d == oid]
        if mine:
            ours.add(xid)
            rel = names.get(mine[0], "catalog/other relation")
            keyed.append(((rmgr, rtype, rel), length, fpi or 0, xid))
        else:
            keyed.append(((rmgr, rtype, "-"), length, fpi or 0, -1 if rels else xid))
    groups: dict[tuple[str, str, str], list[int]] = defaultdict(lambda: [0, 0, 0])
    for (rmgr, rtype, rel), length, fpi, xid in keyed:
        if rel == "-" and not (rmgr == "Transaction" and xid in ours and xid):
            rmgr, rtype, rel = "other, server-wide", "", "-"
        g = groups[(rmgr, rtype, rel)]
        g[0] += 1
        g[1] += length
        g[2] += fpi
    return [{"rmgr": k[0], "type": k[1], "relation": k[2], "records": v[0], "bytes": v[1], "fpi_bytes": v[2]}
            for k, v in sorted(groups.items(), key=lambda kv: -kv[1][1])]


def table(groups: list[dict[str, Any]], jobs: int) -> str:
    """Markdown: per group, records and bytes per job, FPI bytes per job."""
    lines = ["| record | relation | records/job | bytes/job | of which FPI |", "|---|---|--:|--:|--:|"]
    for g in groups:
        if g["bytes"] / jobs < 0.5 and g["records"]:
            continue
        lines.append(f"| {g['rmgr']} {g['type']} | {g['relation']} | {g['records'] / jobs:.3f} | "
                     f"{g['bytes'] / jobs:,.1f} | {g['fpi_bytes'] / jobs:,.1f} |")
    total = sum(g["bytes"] for g in groups if g["rmgr"] != "other, server-wide")
    lines.append(f"| **this database's records + its commits** | | | **{total / jobs:,.1f}** | |")
    return "\n".join(lines)
