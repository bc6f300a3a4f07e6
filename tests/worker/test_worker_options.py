"""Every way to start a worker takes the same options, refuses the same values with the same
message, and has the same defaults: all of them come from ``errands.worker.settings``.

The entry points: ``errands worker`` (click), ``manage.py errands_worker`` (its argparse options,
parsed, not run), ``app.run_worker`` and ``app.run_until_empty``, the in-process worker
(``InProcessWorker``, ``start_worker``), Flask's ``start_worker``, and the ASGI lifespan
(``ErrandsLifespan``, ``errands_lifespan``).  A refused value fails before anything starts, so
none of these runs a worker here."""

from __future__ import annotations

import typing
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any

import click
import pytest
from click.testing import CliRunner

from errands import ConfigurationError, Errands, InvalidQueueName
from errands.cli import main
from errands.cli.worker import option_name, worker_settings
from errands.cli.worker import worker as cli_worker
from errands.contrib import flask_run, inprocess
from errands.worker.settings import (
    EMBEDDED_SHUTDOWN_TIMEOUT,
    OPTIONS,
    PROCESSES,
    WorkerOptions,
    WorkerSettings,
)
from errands.worker.supervisor import Supervisor

QUEUE_REFUSAL = ("invalid queue name 'not a queue!': use 1-60 letters, digits, '-', '_' or '.' "
                 "(not '.' or '..')")

# (the keyword and value a Python entry point is given, the same value on a command line, the one message)
REFUSED: list[tuple[dict[str, Any], list[str], dict[str, str], str]] = [
    ({"concurrency": 0}, ["-c", "0"], {}, "concurrency must be an integer from 1 to 1000, got 0"),
    ({"concurrency": 1001}, ["--concurrency", "1001"], {}, "concurrency must be an integer from 1 to 1000, got 1001"),
    ({"sleep": 0}, ["--sleep", "0"], {}, "sleep must be a number of seconds of at least 0.01, got 0"),
    ({"sleep": 0.001}, [], {"ERRANDS_SLEEP": "0.001"}, "sleep must be a number of seconds of at least 0.01, got 0.001"),
    ({"lease": 0.5}, ["--lease", "0.5"], {}, "lease must be a number of seconds of at least 1, got 0.5"),
    ({"prefetch": -1}, ["--prefetch", "-1"], {}, "prefetch must be an integer from 0 to 1000, got -1"),
    ({"prefetch": 1001}, [], {"ERRANDS_PREFETCH": "1001"}, "prefetch must be an integer from 0 to 1000, got 1001"),
    ({"shutdown_timeout": -1}, ["--shutdown-timeout", "-1"], {},
     "shutdown_timeout must be a number of seconds of at least 0, got -1"),
    ({"max_jobs": 0}, ["--max", "0"], {}, "max_jobs must be an integer of at least 1, got 0"),
    ({"max_memory": 0}, [], {"ERRANDS_MAX_MEMORY": "0"}, "max_memory must be an integer of at least 1, got 0"),
    ({"min_sleep": 0}, ["--min-sleep", "0"], {}, "min_sleep must be a number of seconds of at least 0.001, got 0"),
    ({"concurrency": "many"}, [], {"ERRANDS_CONCURRENCY": "many"},
     "concurrency must be an integer from 1 to 1000, got 'many'"),
    ({"burst": "bogus"}, [], {"ERRANDS_BURST": "bogus"}, "burst must be a boolean, got 'bogus'"),
    ({"listen": "bogus"}, [], {"ERRANDS_NO_LISTEN": "bogus"}, "listen must be a boolean, got 'bogus'"),
    ({"scheduler": "bogus"}, [], {"ERRANDS_NO_SCHEDULER": "bogus"}, "scheduler must be a boolean, got 'bogus'"),
    ({"queues": ["not a queue!"]}, ["-q", "not a queue!"], {}, QUEUE_REFUSAL),
]
IDS = [message.split(", got")[0].replace(" ", "-") + f"-{i}" for i, (*_, message) in enumerate(REFUSED)]
PROCESSES_REFUSED = [(["-p", "0"], {}, "processes must be an integer from 1 to 256, got 0"),
                     ([], {"ERRANDS_PROCESSES": "257"}, "processes must be an integer from 1 to 256, got 257")]


@pytest.fixture
def bare_app(tmp_path: Any) -> Iterator[Errands]:
    """An app no worker will ever reach the tables of: every refusal comes first."""
    app = Errands(f"sqlite:///{tmp_path / 'never.db'}")
    yield app
    app.close()


def _split(given: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    options = dict(given)
    return options.pop("queues", None), options


def _python_entry_points() -> list[tuple[str, Callable[..., Any]]]:
    """Each Python entry point as ``call(app, queues, **options)``."""
    points: list[tuple[str, Callable[..., Any]]] = [
        ("run_worker", lambda app, queues, **o: app.run_worker(queues, **o)),
        ("run_until_empty", lambda app, queues, **o: app.run_until_empty(queues, **o)),
        ("InProcessWorker", lambda app, queues, **o: inprocess.InProcessWorker(app, queues, **o)),
        ("inprocess.start_worker", lambda app, queues, **o: inprocess.start_worker(app, queues, stop_at_exit=False,
                                                                                   **o)),
        ("flask_run.start_worker", lambda app, queues, **o: flask_run.start_worker(app, queues, stop_at_exit=False,
                                                                                   **o)),
        ("WorkerSettings.of", lambda app, queues, **o: WorkerSettings.of(queues, **o)),
    ]
    try:
        from errands.contrib import asgi
    except ImportError:  # errands[dashboard] not installed: the lifespan is not there to test
        return points
    points += [("ErrandsLifespan", lambda app, queues, **o: asgi.ErrandsLifespan(app, queues, **o)),
               ("errands_lifespan", lambda app, queues, **o: asgi.errands_lifespan(app, queues, **o))]
    return points


PYTHON_ENTRY_POINTS = _python_entry_points()


@pytest.mark.parametrize(("given", "args", "env", "message"), REFUSED, ids=IDS)
@pytest.mark.parametrize(("entry", "call"), PYTHON_ENTRY_POINTS, ids=[name for name, _ in PYTHON_ENTRY_POINTS])
def test_each_python_entry_point_refuses_with_the_one_message(bare_app: Errands, entry: str, call: Callable[..., Any],
                                                              given: dict[str, Any], args: list[str],
                                                              env: dict[str, str], message: str) -> None:
    queues, options = _split(given)
    with pytest.raises(ConfigurationError) as refused:
        call(bare_app, queues, **options)
    assert str(refused.value) == message
    if "queues" in given:  # what the in-process worker raised for a queue name before, still caught
        assert isinstance(refused.value, InvalidQueueName)


def _errands_worker(args: list[str], env: dict[str, str], db: str) -> click.testing.Result:
    return CliRunner().invoke(main, ["worker", "--once", *args],  # (--once: should a value pass, it exits)
                              env={"ERRANDS_APP": "sample_jobs:app", "ERRANDS_DATABASE_URL": db,
                                   "ERRANDS_CONFIG": "none", **env})


@pytest.mark.parametrize(("given", "args", "env", "message"), REFUSED, ids=IDS)
def test_errands_worker_refuses_with_the_one_message(tmp_path: Any, given: dict[str, Any], args: list[str],
                                                     env: dict[str, str], message: str) -> None:
    done = _errands_worker(args, env, f"sqlite:///{tmp_path / 'never.db'}")
    assert done.exit_code == 2, done.output
    assert message in " ".join(done.output.split()), done.output  # (click wraps long lines)


@pytest.mark.parametrize(("args", "env", "message"), PROCESSES_REFUSED)
def test_the_forking_entry_points_refuse_processes_with_the_one_message(
        tmp_path: Any, bare_app: Errands, monkeypatch: pytest.MonkeyPatch, args: list[str], env: dict[str, str],
        message: str) -> None:
    done = _errands_worker(args, env, f"sqlite:///{tmp_path / 'never.db'}")
    assert done.exit_code == 2 and message in " ".join(done.output.split()), done.output
    with pytest.raises(ConfigurationError, match=f"^{message}$"):
        Supervisor(bare_app, WorkerSettings(queues=("default",)), int(message.rsplit(" ", 1)[1]))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _manage_py_refusal(args) == message


def _manage_py_parser() -> Any:
    pytest.importorskip("django")
    from errands.contrib.django.management.commands.errands_worker import Command

    return Command().create_parser("manage.py", "errands_worker")


def _manage_py_refusal(args: list[str]) -> str:
    """The reason ``manage.py errands_worker ARGS`` refuses its options (parsed, not run), without
    argparse's "Error: argument --flag: " and the variable a value came from."""
    from django.core.management import CommandError

    with pytest.raises(CommandError) as refused:
        _manage_py_parser().parse_args(args)
    return str(refused.value).split(": ", 2)[2].split(" (from ERRANDS_")[0]


@pytest.mark.parametrize(("given", "args", "env", "message"), REFUSED, ids=IDS)
def test_manage_py_errands_worker_refuses_with_the_one_message(monkeypatch: pytest.MonkeyPatch,
                                                               given: dict[str, Any], args: list[str],
                                                               env: dict[str, str], message: str) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert _manage_py_refusal(args) == message


def test_every_option_is_on_every_command_line_with_the_settings_default() -> None:
    specs = [*OPTIONS.values(), PROCESSES]
    params = {p.name: p for p in cli_worker.params if isinstance(p, click.Option)}
    assert set(params) == {option_name(spec) for spec in specs} | {"once"}
    for spec in specs:
        param = params[option_name(spec)]
        assert (param.opts, param.envvar, param.help) == (list(spec.flags), spec.envvar, spec.help), spec.name
        if spec.kind is bool:  # a flag: off unless given; --no-... turns a default-on option off
            assert param.is_flag and param.default is False and spec.default is spec.negated, spec.name
        elif spec.kind is str:
            assert param.multiple and spec.default is None  # none given: the app's queues
        else:
            assert param.default == spec.default, spec.name


def test_manage_py_errands_worker_has_every_option_with_the_settings_default() -> None:
    specs = [*OPTIONS.values(), PROCESSES]
    parser = _manage_py_parser()
    parsed = vars(parser.parse_args([]))
    for spec in specs:
        default = False if spec.kind is bool else [] if spec.kind is str else spec.default
        assert parsed[option_name(spec)] == default, spec.name
    assert parsed["once"] is False


def test_the_keywords_are_the_settings_fields() -> None:
    hints = typing.get_type_hints(WorkerSettings)
    assert typing.get_type_hints(WorkerOptions) == {f.name: hints[f.name] for f in fields(WorkerSettings)
                                                    if f.name != "queues"}
    assert list(OPTIONS) == [f.name for f in fields(WorkerSettings)]
    defaults = WorkerSettings(queues=("q",))
    assert all(getattr(defaults, name) == spec.default for name, spec in OPTIONS.items() if name != "queues")


def test_every_option_given_reaches_the_settings(bare_app: Errands) -> None:
    """From the in-process worker and both command lines, the new options too (the other Python entry
    points hand their keywords to the in-process worker or to ``WorkerSettings.of``, as the
    refusals above show for each option)."""
    given: dict[str, Any] = {"concurrency": 3, "burst": True, "max_jobs": 4, "max_memory": 512, "sleep": 2,
                             "shutdown_timeout": 5, "lease": 60, "min_sleep": 0.5, "prefetch": 7, "listen": False,
                             "scheduler": False}
    assert set(given) == set(WorkerOptions.__annotations__)
    expected = WorkerSettings(queues=("mails", "default"), **given)
    assert (expected.sleep, expected.lease) == (2.0, 60.0)  # seconds are floats, however given
    assert inprocess.InProcessWorker(bare_app, ["mails", "default"], **given).settings == expected
    assert inprocess.InProcessWorker(bare_app).settings == WorkerSettings(
        queues=(), shutdown_timeout=EMBEDDED_SHUTDOWN_TIMEOUT)
    args = ["-q", "mails,default", "-c", "3", "--burst", "--max", "4", "--max-memory", "512", "--sleep", "2",
            "--shutdown-timeout", "5",
            "--lease", "60", "--min-sleep", "0.5", "--prefetch", "7", "--no-listen", "--no-scheduler"]
    with cli_worker.make_context("worker", list(args)) as ctx:  # (click consumes the list it is given)
        assert worker_settings(ctx.params, lambda: ["default"]) == expected
    parsed = vars(_manage_py_parser().parse_args(list(args)))
    assert worker_settings(parsed, lambda: ["default"]) == expected
    with pytest.raises(ConfigurationError, match="burst=False"):
        bare_app.run_until_empty(burst=False)
