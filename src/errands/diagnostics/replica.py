"""``errands doctor``'s look at the read replica (``read_url``): does it answer, does it replay the
primary, how far behind is it, and does it hold this code's schema.  Every problem here is a warning:
errands works without the replica (its reads go to the primary), only the load it was to take stays put."""

from __future__ import annotations

from ..core.errors import StoreError, StoreUnavailable
from .commands import command
from .context import DoctorContext
from .model import Check, Status

NAME = "read_replica"


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def read_replica(ctx: DoctorContext) -> Check:
    """The replica's state as the read router sees it, in words (called only when one is configured)."""
    router = ctx.app.read_router
    replica = router.replica_store()
    assert replica is not None
    where, bound = replica.safe_url, router.max_lag
    try:
        state = replica.db.run_unchecked(replica.dialect.replica_state)
        version = replica.current_version()
    except StoreUnavailable as exc:
        return Check(NAME, Status.WARN, f"the read replica {where} does not answer ({_one_line(exc)}): the "
                     "dashboard, status, /metrics and the backlog read the primary meanwhile",
                     fix="check that the replica runs and that read_url's host, port, user and password are right",
                     data={"replica": where, "answers": False})
    except StoreError as exc:
        return Check(NAME, Status.WARN, f"the read replica {where} answers but its replication state cannot be "
                     f"read ({_one_line(exc)}): reads go to the primary",
                     fix="grant read_url's user the right to read the replication state (MySQL: REPLICATION "
                         "CLIENT, for SHOW REPLICA STATUS)", data={"replica": where, "answers": True})
    data = {"replica": where, "answers": True, "replicating": state.replicating, "lag_seconds": state.lag,
            "max_lag_seconds": bound, "schema_version": version}
    code = replica.dialect.schema_version
    if version != code:
        return Check(NAME, Status.WARN, f"the read replica {where} has "
                     + ("no errands tables" if version is None else f"errands schema {version}")
                     + f", this code needs {code}: reads go to the primary", data=data,
                     fix=f"run `{command('migrate')}` on the primary and let the replica replay it; check that "
                         "read_url names a replica of this database")
    if not state.replicating:
        return Check(NAME, Status.WARN, f"the read replica {where} is not in recovery (it replays no primary): it "
                     "takes writes of its own, and what it shows may not be this database's state", data=data,
                     fix="point read_url at a streaming replica (a hot standby) of the primary; a promoted "
                         "standby is a primary now")
    if state.lag is None:
        return Check(NAME, Status.WARN, f"the read replica {where} cannot tell its lag (replication stopped?): "
                     "reads go to the primary", data=data, fix="check the replication on the replica")
    if state.lag > bound:
        return Check(NAME, Status.WARN, f"the read replica {where} lags {state.lag:.1f} s, more than read_max_lag "
                     f"({bound:g} s): reads go to the primary until it catches up", data=data,
                     fix="look at the replica's load and network, or raise read_max_lag (keep it under the lease)")
    return Check(NAME, Status.OK, f"the read replica {where} answers, replays the primary, lag {state.lag:.1f} s "
                 f"(bound {bound:g} s): the dashboard's lists and figures, status, /metrics and the backlog read "
                 "there", data=data)
