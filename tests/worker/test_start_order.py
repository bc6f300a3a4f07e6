"""What a worker does before it claims: register, and open its heartbeat's connection.

Behind PgBouncer (which opens server connections one at a time) or on a busy server, a new
connection can take longer than a lease.  A worker that claimed first and connected its
heartbeat later would let its first leases lapse, and its jobs would run twice."""

from __future__ import annotations

import threading
from typing import Any

from helpers import drain


def test_a_worker_claims_only_once_its_heartbeat_holds_a_connection(app: Any, monkeypatch: Any) -> None:
    @app.job(name="noop")
    def noop() -> None: ...

    noop.enqueue()
    events: list[str] = []
    beat, claim = app.store.workers.heartbeat, app.store.jobs.claim

    def heartbeat(*args: Any, **kwargs: Any) -> Any:
        result = beat(*args, **kwargs)
        events.append(f"beat:{threading.current_thread().name}")
        return result

    def claiming(*args: Any, **kwargs: Any) -> Any:
        events.append("claim")
        return claim(*args, **kwargs)

    monkeypatch.setattr(app.store.workers, "heartbeat", heartbeat)
    monkeypatch.setattr(app.store.jobs, "claim", claiming)
    assert drain(app) == 1
    assert events.index("beat:errands-heartbeat") < events.index("claim")
