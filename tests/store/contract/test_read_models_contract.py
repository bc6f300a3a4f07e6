"""``store.insights``, ``store.operations``, ``store.accounts`` and ``store.alerts``: the reads people
see and the changes operators make, on every backend (states judged by the database clock)."""

from __future__ import annotations

from datetime import timedelta

from helpers import wait_for_db_clock

from errands.core.rows import JobState
from errands.store import Store
from errands.store.accounts import used_mark
from errands.store.insights import Backlog

from .support import OTHER, OWNER, claim, claim_ids, count, enqueue, job, within

STATES = ("ready", "delayed", "blocked", "running", "stale")


def _one_of_each_state(store: Store) -> dict[str, int]:
    """A job in each state of the jobs table (the stale one's lease already lapsed)."""
    stale, running = enqueue(store, 2, name="worked")
    claim(store, OTHER, limit=1, lease=0.05)
    claim(store, limit=1, lease=300.0)
    [ready] = store.jobs.enqueue([job("alpha", payload='{"args":["needle"],"kwargs":{}}')])
    [delayed] = enqueue(store, delay=300.0, label="later")
    [blocked] = store.jobs.enqueue([job(after=(running,))])
    wait_for_db_clock(store, store.jobs.get_job(stale).reserved_until)  # type: ignore[arg-type, union-attr]
    return {"ready": ready, "delayed": delayed, "blocked": blocked, "running": running, "stale": stale}


# ---------------------------------------------------------------------------------- insights
def test_search_jobs_and_count_jobs_filter_by_state_name_text_and_page(store: Store) -> None:
    ids = _one_of_each_state(store)
    now = store.now()
    for state in STATES:
        found = store.insights.search_jobs(state=state)
        assert [r.id for r in found] == [ids[state]], state
        assert found[0].state(now).value == state
        assert store.insights.count_jobs(state=state) == 1
    assert [r.id for r in store.insights.search_jobs(name="alp")] == [ids["ready"]]
    assert [r.id for r in store.insights.search_jobs(text="needle")] == [ids["ready"]]
    assert [r.id for r in store.insights.search_jobs(text="later")] == [ids["delayed"]]
    newest_first = sorted(ids.values(), reverse=True)
    assert [r.id for r in store.insights.search_jobs(limit=2)] == newest_first[:2]
    assert [r.id for r in store.insights.search_jobs(before_id=newest_first[1], limit=2)] == newest_first[2:4]
    assert [r.id for r in store.insights.search_jobs(oldest_first=True, limit=1)] == [min(ids.values())]
    assert store.insights.count_jobs() == 5 and store.insights.count_jobs(cap=2) == 3
    assert sorted(r.id for r in store.insights.jobs_by_ids([ids["ready"], ids["stale"]])) == sorted(
        [ids["ready"], ids["stale"]])


def test_capped_counts_backlog_and_oldest_ready_judge_by_the_database_clock(store: Store) -> None:
    ids = _one_of_each_state(store)
    now = store.now()
    [overdue] = store.jobs.enqueue([job(run_at=now - timedelta(seconds=100))])
    assert store.endings.bury(None, ids["ready"], "E", "dead")
    [queue] = store.insights.capped_counts(["default"]).values()
    assert queue.counts == {"ready": 1, "delayed": 1, "blocked": 1, "running": 1, "stale": 1, "failed": 1}
    assert queue.at_least == frozenset()
    due = store.jobs.get_job(overdue).available_at  # type: ignore[union-attr]
    assert queue.oldest_due == due
    assert store.insights.oldest_ready(["default", "empty"]) == {"default": due}
    backlog = store.insights.backlog(["default", "empty"])
    assert backlog["empty"] == Backlog(0, 0)
    assert backlog["default"].jobs == 1 and 100 <= backlog["default"].age_seconds <= 100 + 60
    store.features.set_paused("default", True)
    assert store.insights.backlog(["default"])["default"].jobs == 0


def test_held_jobs_and_running_now_list_what_each_worker_holds(store: Store) -> None:
    ids = enqueue(store, 3)
    claim(store, limit=2, lease=60.0)
    claim(store, OTHER, lease=30.0)
    assert store.insights.held_jobs() == {OWNER: ids[:2], OTHER: ids[2:]}
    running = store.insights.running_now()
    held = [(r[0], r[1]) for r in running]
    assert held[0] == (OTHER, ids[2]) and sorted(held[1:]) == [(OWNER, ids[0]), (OWNER, ids[1])]  # by lease end
    assert all(r[5] > r[4] for r in running)


def test_the_dead_letter_is_searched_counted_and_grouped(store: Store) -> None:
    a, b = enqueue(store, 2, name="mailer")
    [c] = enqueue(store, name="billing", queue="money", label="invoice 7")
    for job_id, (kind, message) in zip((a, b, c), [("SMTPError", "refused"), ("SMTPError", "refused"),
                                                    ("KeyError", "no such customer")], strict=True):
        assert store.endings.bury(None, job_id, kind, message)
    assert [f.id for f in store.insights.search_failed()] == [c, b, a]
    assert [f.id for f in store.insights.search_failed(text="customer")] == [c]
    assert [f.id for f in store.insights.search_failed(text="invoice")] == [c]
    assert [f.id for f in store.insights.search_failed(name="mail", limit=1)] == [b]
    assert [f.id for f in store.insights.search_failed(before_id=c)] == [b, a]
    assert store.insights.count_failed() == 3 and store.insights.count_failed(queue="money") == 1
    assert store.insights.failed_ids(text="SMTP") == [a, b]
    groups = store.insights.failure_groups()
    assert [(g.name, g.error_type, g.message, g.entries, g.example_id) for g in groups] == [
        ("mailer", "SMTPError", "refused", 2, b), ("billing", "KeyError", "no such customer", 1, c)]


def test_throughput_buckets_sum_the_minutes_stats(store: Store) -> None:
    start = store.now() - timedelta(minutes=30)
    store.insights.add_stats({("q", True): 3, ("q", False): 1, ("r", True): 2})
    store.insights.add_stats({("q", True): 2})
    assert store.insights.throughput_buckets(start, 3600) == [(0, 7, 1)]
    assert sorted(store.insights.queue_throughput_buckets(start, 3600)) == [("q", 0, 5, 1), ("r", 0, 2, 0)]
    assert store.insights.queue_throughput_buckets(start, 3600, "r") == [("r", 0, 2, 0)]
    assert store.insights.throughput_buckets(store.now() + timedelta(hours=1), 60) == []


def test_recent_failures_outcomes_and_active_queues(store: Store) -> None:
    [failed] = enqueue(store, name="flaky", queue="work", max_attempts=3)
    [cancelled] = enqueue(store, name="dropped", queue="other")
    claim(store, queues=("work",))
    store.endings.bury(OWNER, failed, "E", "first")
    assert store.features.cancel(cancelled, 60.0, message="not needed") == "cancelled"
    store.features.set_paused("idle", True)
    [(job_id, attempt, _, kind, message, name, queue)] = store.insights.recent_failures()
    assert (job_id, attempt, kind, message, name, queue) == (failed, 1, "E", "first", "flaky", "work")
    [(outcome_id, name, queue, state, _, message)] = store.insights.recent_outcomes()
    assert (outcome_id, name, queue, state, message) == (cancelled, "dropped", "other", "cancelled", "not needed")
    assert store.insights.active_queues() == ["idle", "work"]


# ---------------------------------------------------------------------------------- operations
def test_bulk_actions_change_only_waiting_jobs_that_still_match(store: Store) -> None:
    [held] = enqueue(store)
    claim(store)
    waiting = enqueue(store, 3)
    every = [held, *waiting]
    last = max(every)
    assert store.operations.count_waiting({}, 0, last, 100) == 3
    assert store.operations.window_edge(0, last, rows=2) == sorted(every)[1]
    assert store.operations.waiting_ids({"queue": "default"}, 0, last) == waiting
    assert store.operations.apply("priority", every, {}, priority=9) == 3
    assert store.operations.apply("move", every, {"queue": "nowhere"}, queue="elsewhere") == 0
    assert store.operations.apply("move", every, {}, queue="elsewhere") == 3
    assert [(r.queue, r.priority) for r in store.jobs.list_jobs() if r.id in waiting] == [("elsewhere", 9)] * 3
    assert store.operations.apply("cancel", every, {"queue": "elsewhere"}, record_ttl=60.0, message="bulk") == 3
    assert [r.id for r in store.jobs.list_jobs()] == [held]
    assert store.jobs.get_job(held).priority == 0  # type: ignore[union-attr]
    assert {store.features.get_result(i).state for i in waiting} == {JobState.CANCELLED}  # type: ignore[union-attr]


# ---------------------------------------------------------------------------------- accounts
def test_users_are_created_listed_and_updated(store: Store) -> None:
    before = store.now()
    user_id = store.accounts.create_user("ann_1%", "hash-1", "admin")
    store.accounts.create_user("bob", "hash-2", "viewer")
    user = store.accounts.get_user("ann_1%")
    assert user is not None and (user.id, user.password_hash, user.role, user.disabled, user.theme) == (
        user_id, "hash-1", "admin", False, "auto")
    assert within(user.created_at, before, store.now()) and user.last_login_at is None
    assert [u.username for u in store.accounts.list_users()] == ["ann_1%", "bob"]
    assert [u.username for u in store.accounts.list_users(search="1%")] == ["ann_1%"]
    assert [u.username for u in store.accounts.list_users(search="_")] == ["ann_1%"]  # wildcards taken literally
    assert store.accounts.update_user("bob", theme="dark") is True
    assert store.accounts.update_user("bob", theme="dark") is True  # unchanged, still found
    assert store.accounts.update_user("nobody", theme="dark") is False
    assert store.accounts.count_users() == 2 and store.accounts.get_user("nobody") is None


def test_sessions_and_remember_tokens_expire_and_rotate_by_the_database_clock(store: Store) -> None:
    user_id = store.accounts.create_user("ann", "hash", "admin")
    before = store.now()
    store.accounts.create_session("long", user_id, "csrf-1", 300.0)
    after = store.now()
    store.accounts.create_session("short", user_id, "csrf-2", 0.05)
    made = store.now()  # (read after the insert: the short session expires 0.05 s after a moment before this)
    session = store.accounts.get_session("long")
    assert session is not None and session.csrf == "csrf-1" and session.user.username == "ann"
    assert within(session.expires_at, before + timedelta(seconds=300), after + timedelta(seconds=300))
    assert store.accounts.get_user("ann").last_login_at is not None  # type: ignore[union-attr]
    wait_for_db_clock(store, made + timedelta(seconds=0.05))
    assert store.accounts.get_session("short") is None
    digest = "d" * 64
    store.accounts.create_remember("sel", digest, user_id, 300.0)
    first = store.accounts.use_remember("sel", keep_for=300.0, grace=60.0)
    assert first is not None and (first.validator_hash, first.used, first.recently_used) == (digest, False, False)
    second = store.accounts.use_remember("sel", keep_for=300.0, grace=60.0)
    assert second is not None and (second.validator_hash, second.used, second.recently_used) == (
        used_mark(digest), True, True)
    store.accounts.prune()
    assert count(store, "sessions") == 1
    assert store.accounts.update_user("ann", disabled=True) is True
    assert store.accounts.get_session("long") is None and count(store, "remember") == 0


def test_login_attempts_and_the_audit_log(store: Store) -> None:
    for ok in (False, False, True):
        store.accounts.record_login("ann", "10.0.0.1", ok)
    store.accounts.record_login("ann", "10.0.0.2", False, refused=True)
    assert store.accounts.failed_logins(username="ann", window=60.0) == 2
    assert store.accounts.failed_logins(ip="10.0.0.2", window=60.0) == 0
    for n in range(3):
        store.accounts.audit("ann", "retry", f"job {n}", None if n else "first")
    log = store.accounts.audit_log()
    assert [(e.target, e.detail) for e in log] == [("job 2", None), ("job 1", None), ("job 0", "first")]
    assert [e.target for e in store.accounts.audit_log(limit=1, before_id=log[0].id)] == ["job 1"]


# ---------------------------------------------------------------------------------- alerts
def test_an_alert_crosses_and_clears_once_each(store: Store) -> None:
    at = store.now()
    assert store.alerts.cross("backlog", "q", 120.0, 100.0, at) is True
    assert store.alerts.cross("backlog", "q", 130.0, 100.0, at) is False  # one deliverer per change
    store.alerts.still_crossed([("backlog", "q", 140.0, 100.0)], at)
    [state] = store.alerts.crossed()
    assert (state.kind, state.subject, state.crossed, state.value, state.threshold) == ("backlog", "q", True, 140.0,
                                                                                        100.0)
    assert store.alerts.clear("backlog", "q", 10.0, at) is True
    assert store.alerts.clear("backlog", "q", 10.0, at) is False
    assert store.alerts.crossed() == [] and [s.value for s in store.alerts.states()] == [10.0]


def test_one_evaluator_takes_each_turn_and_the_measurements_read_the_tables(store: Store) -> None:
    assert store.alerts.take_turn(60.0) is True
    assert store.alerts.take_turn(60.0) is False
    assert store.alerts.states() == []
    ids = enqueue(store, 3)
    for job_id in ids[:2]:
        assert store.endings.bury(None, job_id, "E", "dead")
    assert store.alerts.dead_letter_count(cap=1) == 2 and store.alerts.dead_letter_count(cap=10) == 2
    store.workers.register("w", "host", 1, ["default"], 1, lease=30.0)
    [(age, lease)] = store.alerts.heartbeat_ages()
    assert 0 <= age < 60 and lease == 30.0
    store.features.set_paused("paused", True)
    enqueue(store, queue="paused")
    now, oldest = store.alerts.oldest_ready(None)
    assert oldest == {"default": store.jobs.get_job(ids[2]).available_at} and now >= oldest["default"]  # type: ignore[union-attr]
    assert claim_ids(store) == [ids[2]]
