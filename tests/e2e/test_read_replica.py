"""Read replicas on a real streaming replica: a private PostgreSQL primary and its hot standby
(tests/e2e/private_replication.py), the app on the primary with ``read_url`` on the standby.

- what the primary writes shows on the dashboard, in ``errands status`` and on ``/metrics`` once the
  standby replayed it, and not before (replay paused: the figures are the standby's, not the primary's);
- claims and settles never go to the standby (it refuses every write: a drain that finishes proves it);
- the lag shown is the standby's own: replay paused and the primary written, it grows past a small bound
  and the reads go to the primary, which the dashboard says; replay resumed, back to the replica;
- the standby cut off from its primary (the primary stopped): its lag counts as unknown, whatever the bound;
- the standby stopped: the reads go to the primary and the dashboard still answers; started again,
  back to the replica.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from helpers import drain, scaled, wait_for
from private_replication import ReplicatedPair, replicated_pair
from starlette.testclient import TestClient

from errands import Errands
from errands.core.rows import NewJob
from errands.dashboard import AuthSettings, create_dashboard
from errands.diagnostics.checks import diagnose
from errands.metrics import render
from errands.services import operator as ops
from errands.services.passwords import hash_password
from errands.services.report import status_report
from errands.store import replicas

pytestmark = [pytest.mark.slow, pytest.mark.timeout(scaled(300))]

ADMIN, PASSWORD = "ada", "correct horse battery"
PAYLOAD = '{"args":[],"kwargs":{}}'
SMALL_BOUND = 1.0
"""read_max_lag of the strict app: a paused replay passes it within a second or two."""


@pytest.fixture(scope="module")
def pair() -> Iterator[ReplicatedPair]:
    yield from replicated_pair(synchronous=False)


@pytest.fixture(scope="module")
def apps(pair: ReplicatedPair) -> Iterator[tuple[Errands, Errands]]:
    """Two apps on the pair: ``strict`` falls back past SMALL_BOUND, ``patient`` (an hour) keeps reading
    the standby however far behind it is, which shows what the standby holds."""
    Errands(pair.primary_url).migrate()
    strict = Errands(pair.primary_url, read_url=pair.standby_url, read_max_lag=SMALL_BOUND, lease=5)
    patient = Errands(pair.primary_url, read_url=pair.standby_url, read_max_lag=3600, lease=5)
    strict.store.accounts.create_user(ADMIN, hash_password(PASSWORD), "admin")

    @strict.job(name="e2e.noop")
    def noop() -> None: ...

    pair.wait_caught_up()
    yield strict, patient
    strict.close()
    patient.close()


@pytest.fixture(scope="module")
def web(apps: tuple[Errands, Errands]) -> Iterator[TestClient]:
    with TestClient(create_dashboard(apps[0], settings=AuthSettings()), base_url="https://testserver",
                    raise_server_exceptions=False) as client:
        assert client.post("/login", data={"username": ADMIN, "password": PASSWORD},
                           follow_redirects=False).status_code == 303
        yield client


def _ready(app: Errands, queue: str) -> int:
    return {q.name: q.ready for q in ops.overview(app).queues}.get(queue, 0)


def _enqueue(app: Errands, queue: str, n: int) -> list[int]:
    return app.store.jobs.enqueue([NewJob("e2e.noop", queue, PAYLOAD) for _ in range(n)])


def _replay(pair: ReplicatedPair, paused: bool) -> None:
    with pair.standby.connect() as conn:
        conn.execute("SELECT pg_wal_replay_pause()" if paused else "SELECT pg_wal_replay_resume()")


def _on_replica(app: Errands) -> bool:
    return app.read_router.source().state == replicas.UP


def test_what_the_primary_writes_shows_once_the_standby_replayed_it(pair: ReplicatedPair, apps: Any,
                                                                    web: TestClient) -> None:
    strict, patient = apps
    wait_for(lambda: _on_replica(strict) and _on_replica(patient), timeout=30)
    _replay(pair, paused=True)
    try:
        _enqueue(strict, "e2e_seen", 20)
        # The patient app reads the paused standby: the jobs are not there yet, although the primary has them.
        assert _on_replica(patient) and _ready(patient, "e2e_seen") == 0
        assert status_report(patient)["queues"].get("e2e_seen") is None
        assert strict.store.jobs.counts()["e2e_seen"].ready == 20
    finally:
        _replay(pair, paused=False)
    began = time.monotonic()
    wait_for(lambda: _ready(patient, "e2e_seen") == 20, timeout=30)
    print(f"\nreplay resumed: the standby's figures showed the 20 jobs after {time.monotonic() - began:.2f} s")
    wait_for(lambda: _on_replica(strict), timeout=30)
    report = status_report(strict)
    assert report["queues"]["e2e_seen"]["ready"] == 20 and report["reads"]["source"] == "replica"
    metrics = render(strict)[0].decode()
    assert 'errands_jobs{queue="e2e_seen",state="ready"} 20.0' in metrics
    assert "errands_reads_from_replica 1.0" in metrics
    page = web.get("/")
    assert page.status_code == 200 and 'data-reads="replica"' in page.text and "e2e_seen" in page.text
    [check] = [c for c in diagnose(strict).checks if c.name == "read_replica"]
    assert check.status.value == "ok" and "replays the primary" in check.detail, check
    assert check.data["replicating"] is True and check.data["lag_seconds"] <= SMALL_BOUND
    # The standby served those reads: the app's sessions are there.
    assert pair.standby.scalar("SELECT count(*) FROM pg_stat_activity WHERE datname = 'errands_e2e' "
                               "AND backend_type = 'client backend' AND pid <> pg_backend_pid()") >= 1


def test_claims_and_settles_go_to_the_primary(pair: ReplicatedPair, apps: Any) -> None:
    strict, _ = apps
    wait_for(lambda: _on_replica(strict), timeout=30)
    ids = _enqueue(strict, "e2e_drain", 30)
    # The standby refuses every write, so a claim or a settle sent there would fail the drain.
    assert pair.standby.in_recovery()
    assert drain(strict, queues=("e2e_drain",)) == len(ids)
    assert strict.store.jobs.counts().get("e2e_drain") is None or strict.store.jobs.counts()["e2e_drain"].ready == 0
    pair.wait_caught_up()
    wait_for(lambda: _ready(strict, "e2e_drain") == 0 and _on_replica(strict), timeout=30)


def test_a_standby_behind_the_bound_sends_the_reads_to_the_primary(pair: ReplicatedPair, apps: Any,
                                                                   web: TestClient) -> None:
    strict, patient = apps
    wait_for(lambda: _on_replica(strict), timeout=30)
    _replay(pair, paused=True)
    try:
        _enqueue(strict, "e2e_lag", 5)
        source = wait_for(lambda: (lambda s: s if s.state == replicas.LAGGING else None)(
            strict.read_router.source()), timeout=30)
        assert source.lag is not None and source.lag > SMALL_BOUND
        assert pair.replay_lag_bytes() > 0
        lag = pair.standby.scalar("SELECT EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())")
        assert abs(float(lag) - source.lag) < 2 * replicas.CHECK_EVERY + 1  # the standby's own figure
        # The strict app reads the primary: the new jobs show; the patient one still reads the standby.
        assert _ready(strict, "e2e_lag") == 5 and _ready(patient, "e2e_lag") == 0
        page = web.get("/")
        assert page.status_code == 200 and 'data-reads="lagging"' in page.text
        assert f"(bound {SMALL_BOUND:g} s): reading from the primary" in page.text
        assert web.get("/api/overview").json()["reads"]["state"] == "lagging"
        print(f"\nreplay paused: the strict app's replica lag read {source.lag:.1f} s, "
              f"{pair.replay_lag_bytes()} bytes of WAL not replayed")
    finally:
        _replay(pair, paused=False)
    wait_for(lambda: _on_replica(strict), timeout=30)
    assert _ready(strict, "e2e_lag") == 5
    assert 'data-reads="replica"' in web.get("/").text


def test_a_standby_cut_off_from_its_primary_counts_as_lagging_an_unknown_amount(pair: ReplicatedPair,
                                                                                apps: Any) -> None:
    """The primary stopped: the standby has replayed all it received, which says nothing of what the
    primary may have written since.  Its WAL receiver gone, its lag is unknown however patient the bound
    (before, it read as caught up, lag 0, for as long as the cut lasted)."""
    strict, patient = apps
    wait_for(lambda: _on_replica(strict) and _on_replica(patient), timeout=30)
    pair.primary.stop()
    try:
        wait_for(lambda: pair.standby.scalar("SELECT count(*) FROM pg_stat_wal_receiver") == 0, timeout=30)
        for app in (strict, patient):
            source = wait_for(lambda app=app: (lambda s: s if s.state == replicas.UNKNOWN else None)(
                app.read_router.source()), timeout=30)
            assert source.lag is None
    finally:
        pair.primary.start()
    wait_for(lambda: _on_replica(strict) and _on_replica(patient), timeout=60)
    _enqueue(strict, "e2e_cut", 4)
    wait_for(lambda: _ready(patient, "e2e_cut") == 4, timeout=30)  # streamed and replayed again


def test_a_stopped_standby_sends_the_reads_to_the_primary_and_the_dashboard_still_answers(
        pair: ReplicatedPair, apps: Any, web: TestClient) -> None:
    strict, _ = apps
    wait_for(lambda: _on_replica(strict), timeout=30)
    _enqueue(strict, "e2e_down", 3)
    assert _ready(strict, "e2e_down") == 3  # read on the standby, which the router still trusts below
    pair.standby.stop()
    try:
        began = time.monotonic()
        # At once, before the router's next look: the statements that find the standby gone run on the primary.
        page = web.get("/")
        assert page.status_code == 200 and "e2e_down" in page.text
        wait_for(lambda: strict.read_router.source().state == replicas.DOWN, timeout=30)
        print(f"\nstandby stopped: the reads went to the primary after {time.monotonic() - began:.2f} s")
        for _ in range(5):  # every request answers, from the primary
            page = web.get("/")
            assert page.status_code == 200 and "replica down: reading from the primary" in page.text
        assert _ready(strict, "e2e_down") == 3
        assert status_report(strict)["reads"]["state"] == "down"
        assert "errands_reads_from_replica 0.0" in render(strict)[0].decode()
    finally:
        pair.standby.start()
    wait_for(lambda: _on_replica(strict), timeout=60)
    assert 'data-reads="replica"' in web.get("/").text
