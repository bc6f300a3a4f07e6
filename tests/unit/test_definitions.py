"""Job definitions and enqueue validation that need no database round trip to fail."""

import json
import math
import re
import sys
import types
from datetime import datetime, timedelta
from unittest.mock import patch

import pytest

from errands import (
    ConfigurationError,
    EnqueueError,
    Errands,
    InvalidOption,
    InvalidQueueName,
    PayloadNotSerializable,
    PayloadTooLarge,
    UnknownJob,
)
from errands.core.config import mask_url


@pytest.fixture
def app(tmp_path):
    return Errands(f"sqlite:///{tmp_path / 'x.db'}", payload_limit=1024)


def send_welcome(user_id: int) -> None: ...


def test_name_defaults_to_module_and_function(app):
    job = app.job(send_welcome)
    assert job.name == f"{__name__}.send_welcome"
    assert app.get_job(job.name) is job
    assert job(3) is None  # still callable directly


def test_a_name_no_worker_could_import_is_refused_with_the_fix(app):
    """Issue 25, point 7: a job defined inside a function, or in an interactive session, would be
    enqueued under a name no worker registers; the decorator says so, and how to name it."""
    with pytest.raises(ConfigurationError, match="inside a function.*" + re.escape(f'name="{__name__}.send"')):
        @app.job
        def send(user_id: int) -> None: ...
    typed: dict[str, object] = {"__name__": "__main__"}
    exec("def hello(): pass", typed)  # what the REPL or python -c defines
    fake_main = types.ModuleType("__main__")  # no __file__, no __spec__: an interactive session
    with patch.dict(sys.modules, {"__main__": fake_main}), \
            pytest.raises(ConfigurationError, match=r"interactive session.*name=\"shop\.hello\""):
        app.job(typed["hello"])
    named = app.job(name="shop.hello")(typed["hello"])  # the fix
    assert named.name == "shop.hello"


def test_decorator_options_and_explicit_name(app):
    @app.job(name="mails.welcome", queue="mails", max_attempts=5, backoff="linear", timeout=30, priority=2)
    def send(user_id: int) -> None: ...

    assert send.name == "mails.welcome"
    assert send.options.queue == "mails" and send.options.max_attempts == 5 and send.options.timeout == 30
    assert send.backoff(2) == 20


def test_prepare_encodes_compact_json(app):
    @app.job(name="j")
    def j(a, b=None): ...

    new = j.using(queue="urgent", priority=10, delay=600).prepare(1, b={"x": "é"})
    assert json.loads(new.payload) == {"args": [1], "kwargs": {"b": {"x": "é"}}}
    assert (new.queue, new.priority, new.delay) == ("urgent", 10, 600)
    assert j.options.queue == "default"  # using() never changes the registered job


@pytest.mark.parametrize("value", [object(), {1, 2}, b"bytes", timedelta(seconds=1), math.nan])
def test_arguments_json_cannot_encode_are_refused(app, value):
    @app.job(name="j")
    def j(x): ...

    with pytest.raises(PayloadNotSerializable, match="'j'.*JSON"):
        j.prepare(value)


def test_payload_over_the_cap_is_refused_with_sizes(app):
    @app.job(name="j")
    def j(x): ...

    j.prepare("a" * 900)
    with pytest.raises(PayloadTooLarge, match=r"take \d+ bytes.*limit of 1024"):
        j.prepare("a" * 2000)


@pytest.mark.parametrize("name", ["", "a b", "x" * 61, "mails;drop", "é", 5])
def test_bad_queue_names_are_refused(app, name):
    @app.job(name="j")
    def j(): ...

    with pytest.raises(InvalidQueueName, match="invalid queue name"):
        j.using(queue=name)


def test_good_queue_names(app):
    @app.job(name="j")
    def j(): ...

    for name in ("default", "mails-high", "a.b_c-1", "x" * 60):
        assert j.using(queue=name).options.queue == name


@pytest.mark.parametrize("options", [{"priority": 1.5}, {"priority": 2**40}, {"delay": -1}, {"delay": math.inf},
                                     {"max_attempts": 0}, {"timeout": -3}, {"run_at": datetime(2030, 1, 1)}])
def test_out_of_range_options_are_refused(app, options):
    @app.job(name="j")
    def j(): ...

    with pytest.raises(InvalidOption):
        j.using(**options)


def test_arguments_must_match_the_signature(app):
    @app.job(name="j")
    def j(user_id): ...

    with pytest.raises(InvalidOption, match="do not match job 'j'"):
        j.prepare(1, 2)


def test_unknown_job_by_name(app):
    with pytest.raises(UnknownJob, match="no job named 'ghost'"):
        app.enqueue("ghost")


def test_every_enqueue_error_is_an_enqueue_error():
    for cls in (UnknownJob, InvalidQueueName, InvalidOption, PayloadNotSerializable, PayloadTooLarge):
        assert issubclass(cls, EnqueueError)


def test_registering_two_functions_under_one_name_is_refused(app):
    @app.job(name="dup")
    def a(): ...

    with pytest.raises(ConfigurationError, match="already registered"):
        @app.job(name="dup")
        def b(): ...


def test_unsupported_url_scheme(app):
    with pytest.raises(ConfigurationError, match="unsupported database URL scheme 'redis'"):
        _ = Errands("redis://localhost/0").store


def test_password_is_masked():
    assert mask_url("postgresql://bob:secret@db:5432/app") == "postgresql://bob:***@db:5432/app"
    assert mask_url("sqlite:///x.db") == "sqlite:///x.db"


def test_database_url_from_environment(monkeypatch):
    monkeypatch.setenv("ERRANDS_DATABASE_URL", "sqlite:///from-env.db")
    assert Errands().database_url == "sqlite:///from-env.db"
    monkeypatch.delenv("ERRANDS_DATABASE_URL")
    monkeypatch.setenv("DATABASE_URL", "postgresql://h/db")
    assert Errands().database_url == "postgresql://h/db"
    monkeypatch.delenv("DATABASE_URL")
    assert Errands().database_url == "sqlite:///errands.db"


def test_old_sqlite_is_refused_with_a_clear_message(monkeypatch, tmp_path):
    import sqlite3

    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    with pytest.raises(ConfigurationError, match=r"SQLite 3\.31\.1 is too old: errands needs 3\.35"):
        _ = Errands(f"sqlite:///{tmp_path / 'x.db'}").store
