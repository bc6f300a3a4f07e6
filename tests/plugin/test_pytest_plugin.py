"""The pytest plugin for users' own tests (errands.testing): a small user project runs its tests in a pytest
subprocess that finds the plugin through its ``pytest11`` entry point, as a user's pytest would."""

from __future__ import annotations

import textwrap
from importlib.metadata import entry_points

import pytest

pytest_plugins = ["pytester"]

TASKS = '''
from errands import Errands, Retry

app = Errands("sqlite:///must-stay-untouched.db")   # the tests must never write here
runs: list[str] = []


@app.job(queue="mail")
def send(to: str, subject: str = "hello") -> None:
    runs.append(to)


@app.job(max_attempts=3, backoff=30)
def flaky(n: int) -> None:
    runs.append(f"flaky {n}")
    if runs.count(f"flaky {n}") == 1:
        raise ValueError(f"first try of {n} fails")


@app.job(max_attempts=2, backoff=0)
def broken() -> None:
    raise KeyError("always")


@app.job(max_attempts=5)
def asks_again() -> None:
    if "asked" not in runs:
        runs.append("asked")
        raise Retry(10, "not yet")


@app.job()
def forever(n: int) -> None:
    forever.enqueue(n + 1)


@app.periodic("*/15 * * * *")
def sweep() -> None:
    runs.append("sweep")
'''

USER_TESTS = '''
import pytest

from myproject import tasks


def test_the_fixtures_bind_the_app_to_a_fresh_database(errands_app, errands_jobs):
    assert errands_app is tasks.app
    assert errands_app.database_url.startswith("sqlite:///") and "must-stay-untouched" not in errands_app.database_url
    errands_jobs.assert_not_enqueued()
    tasks.send.enqueue("ada@example.com")


def test_each_test_starts_empty(errands_jobs):
    errands_jobs.assert_not_enqueued()


def test_assertions_by_name_arguments_queue_and_count(errands_jobs):
    tasks.send.enqueue("ada@example.com")
    tasks.send.using(queue="urgent").enqueue(to="bob@example.com", subject="hello")
    errands_jobs.assert_enqueued(tasks.send, count=2)
    errands_jobs.assert_enqueued("myproject.tasks.send", args=["ada@example.com"], queue="mail", count=1)
    errands_jobs.assert_enqueued(tasks.send, args=["bob@example.com"], queue="urgent")  # keyword call, default
    errands_jobs.assert_not_enqueued(tasks.send, args=["bob@example.com"], queue="mail")
    with pytest.raises(AssertionError) as failed:
        errands_jobs.assert_enqueued(tasks.send, kwargs={"to": "eve@example.com"}, count=1)
    message = str(failed.value)
    assert "expected 1 job(s) myproject.tasks.send(to='eve@example.com') in any queue, found 0" in message
    assert "#2 myproject.tasks.send(to='bob@example.com', subject='hello') in 'urgent', ready" in message
    with pytest.raises(AssertionError, match="expected no job in 'mail', found 1"):
        errands_jobs.assert_not_enqueued(queue="mail")


def test_drain_runs_every_queue_and_reports_failures(errands_jobs):
    tasks.runs.clear()
    tasks.send.enqueue("ada@example.com")
    tasks.broken.enqueue()
    with pytest.raises(AssertionError) as failed:
        errands_jobs.drain()
    assert "myproject.tasks.broken: KeyError: 'always' (in the dead letter after 2 attempt(s))" in str(failed.value)
    assert tasks.runs == ["ada@example.com"]


def test_a_handler_asking_to_retry_is_no_failure(errands_jobs, errands_clock):
    tasks.runs.clear()
    errands_clock.freeze()
    tasks.asks_again.enqueue()
    assert errands_jobs.drain() == 1
    errands_clock.advance(10)
    assert errands_jobs.drain() == 1
    errands_jobs.assert_not_enqueued()


def test_drain_stops_at_its_limit(errands_jobs):
    tasks.forever.enqueue(0)
    with pytest.raises(AssertionError, match="drain ran 5 jobs, its limit, and 1 are still ready"):
        errands_jobs.drain(limit=5)


def test_the_frozen_clock_holds_delays_and_backoff(errands_jobs, errands_clock):
    tasks.runs.clear()
    start = errands_clock.freeze("2030-01-01T12:00:00+00:00")
    assert tasks.app.store.now() == start
    tasks.send.using(delay=600).enqueue("later@example.com")
    tasks.flaky.enqueue(1)
    assert errands_jobs.drain(raise_errors=False) == 1
    [retrying] = errands_jobs.enqueued(tasks.flaky)
    assert retrying.state.value == "delayed" and retrying.available_at == start.replace(second=30)
    errands_clock.advance(29)
    assert errands_jobs.drain() == 0
    errands_clock.advance(1)
    assert errands_jobs.drain() == 1
    assert tasks.runs == ["flaky 1", "flaky 1"]
    errands_clock.advance(570)
    assert errands_jobs.drain() == 1 and tasks.runs[-1] == "later@example.com"


def test_cron_slots_follow_the_frozen_clock(errands_jobs, errands_clock):
    errands_clock.freeze("2030-01-01T12:14:00+00:00")
    assert errands_jobs.run_schedules() == []
    errands_clock.advance(59)
    assert errands_jobs.run_schedules() == []
    errands_clock.advance(1)
    [job] = errands_jobs.run_schedules()
    assert job.name == "myproject.tasks.sweep"
    errands_clock.advance(15 * 60)
    assert [j.name for j in errands_jobs.run_schedules()] == ["myproject.tasks.sweep"]
    errands_jobs.assert_enqueued(tasks.sweep, count=2)


def test_the_factory_binds_another_app(errands_app_factory):
    from errands import Errands

    other = Errands("sqlite:///other-untouched.db")
    bound = errands_app_factory(other)
    assert bound is other and "other-untouched" not in other.database_url
    clock = errands_app_factory.clock(other)
    frozen = clock.freeze("2031-05-05T00:00:00")  # naive: read as UTC
    assert other.store.now() == frozen and frozen.isoformat() == "2031-05-05T00:00:00+00:00"


def test_a_test_that_does_not_ask_gets_nothing(request):
    assert not [name for name in request.fixturenames if name.startswith("errands")]
'''

AFTER = '''
from myproject import tasks


def test_zz_the_app_points_back_where_it_did():
    assert tasks.app.database_url == "sqlite:///must-stay-untouched.db"
'''


def test_the_plugin_is_registered_as_a_pytest11_entry_point() -> None:
    found = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert found.get("errands") == "errands.testing.plugin", (
        "the pytest11 entry point is not installed in this environment: reinstall errands (make venv, or "
        "pip install -e .)")


def test_a_user_project_runs_its_tests_with_the_plugin(pytester: pytest.Pytester) -> None:
    pytester.makepyprojecttoml(textwrap.dedent('''
        [tool.pytest.ini_options]
        errands_app = "myproject.tasks:app"
        pythonpath = ["."]
    '''))
    pytester.mkpydir("myproject")
    (pytester.path / "myproject" / "tasks.py").write_text(TASKS)
    tests = pytester.mkdir("tests")
    (tests / "test_user.py").write_text(USER_TESTS)
    (tests / "test_zz_after.py").write_text(AFTER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-p", "no:randomly", "-v")
    result.assert_outcomes(passed=11)
    assert not (pytester.path / "must-stay-untouched.db").exists()
    assert not (pytester.path / "other-untouched.db").exists()


def test_without_an_app_the_fixture_says_how_to_name_one(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_needs_app="def test_it(errands_app):\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*the errands_app fixture needs your app: set `errands_app = yourproject.tasks:app`*"])


def test_the_command_line_option_names_the_app(pytester: pytest.Pytester) -> None:
    pytester.mkpydir("shop")
    (pytester.path / "shop" / "jobs.py").write_text(
        "from errands import Errands\n\nqueue = Errands('sqlite:///untouched.db')\n\n"
        "@queue.job()\ndef ping() -> None: ...\n")
    pytester.makepyfile(test_ping=(
        "from shop.jobs import ping, queue\n\n"
        "def test_ping(errands_app, errands_jobs):\n"
        "    assert errands_app is queue\n"
        "    ping.enqueue()\n"
        "    assert errands_jobs.drain() == 1\n"))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--errands-app", "shop.jobs:queue",
                                           "-o", "pythonpath=.")
    result.assert_outcomes(passed=1)
    assert not (pytester.path / "untouched.db").exists()


def test_a_production_read_replica_is_set_aside_for_the_temporary_database(tmp_path) -> None:
    """An app configured with a read replica (``read_url``, e.g. from ERRANDS_READ_URL) still gets its
    temporary SQLite file: SQLite has no replicas, so the replica is left out for the block and back after."""
    from errands import Errands
    from errands.testing import temporary_database

    replica = "postgresql://reader@replica.invalid/shop"
    app = Errands("postgresql://app@primary.invalid/shop", read_url=replica)

    @app.job(name="noop")
    def noop() -> None:
        return None

    with temporary_database(app, tmp_path):
        noop.enqueue()
        assert app.reads is app.store  # no replica: every read on the temporary file
        assert [job.name for job in app.store.jobs.list_jobs()] == ["noop"]
    assert (app.read_url, app.database_url) == (replica, "postgresql://app@primary.invalid/shop")
