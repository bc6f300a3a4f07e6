"""Autoscaling (docs/autoscaling.md): the SQL queries and the ``/metrics`` gauges a KEDA scaler reads agree
with ``errands status`` on every backend, and the page's YAML samples embed exactly the queries tested here.

The queries and samples are read from the page itself, so the page, the code and the tests cannot drift.
"""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import click
import pytest
import yaml
from helpers import run_cli
from obs_helpers import THREE
from prometheus_client import CollectorRegistry

from errands import Errands
from errands.cli import main
from errands.metrics import ErrandsCollector
from errands.store.dialects.base import Dialect
from errands.store.dialects.mysql import MySQLDialect
from errands.store.dialects.postgres import PostgresDialect
from errands.store.dialects.sqlite import SQLiteDialect
from errands.worker.settings import SHUTDOWN_TIMEOUT

PAGE = Path(__file__).resolve().parents[2] / "docs" / "autoscaling.md"
MARKED = re.compile(r"<!-- autoscaling (query|sample): ([\w ]+?) -->\n```(\w+)\n(.*?)```", re.S)
GRACE_MARGIN = 15
"""Seconds the grace period adds to --shutdown-timeout: giving back, unregistering and exiting (the page's
derivation from the worker's stop: runner._drain, then runner._shutdown's few statements)."""


def marked(kind: str) -> dict[str, tuple[str, str]]:
    """The page's marked blocks of one kind: name -> (fence language, text)."""
    return {name: (language, text) for k, name, language, text in MARKED.findall(PAGE.read_text()) if k == kind}


def query(name: str) -> str:
    language, text = marked("query")[name]
    assert language == "sql", name
    return text


def flat(sql: str) -> str:
    return " ".join(sql.split())


def scalar(app: Errands, sql: str) -> Any:
    def read(cur: Any) -> Any:
        cur.execute(sql)
        return cur.fetchone()[0]

    return app.store.db.run(read)


def test_the_page_holds_a_query_of_each_kind_for_each_backend() -> None:
    assert set(marked("query")) == {f"{d} {kind}" for d in ("postgresql", "mysql", "sqlite")
                                    for kind in ("backlog", "age")}
    assert set(marked("sample")) == {"deployment", "keda postgresql", "keda mysql", "keda prometheus"}


@pytest.mark.parametrize("dialect", [SQLiteDialect("sqlite:///x.db"), PostgresDialect("postgresql://a@db/shop"),
                                     MySQLDialect("mysql://a@db/shop")], ids=lambda d: d.name)
def test_the_page_shows_the_statements_errands_runs(dialect: Dialect) -> None:
    """The /metrics gauges run the dialect's statements; the page shows them with the queue written in."""
    for kind, template in (("backlog", dialect.backlog_jobs_sql), ("age", dialect.backlog_age_sql)):
        ours = dialect.q(template).replace(dialect.placeholder, "'default'")
        assert flat(query(f"{dialect.name} {kind}")) == flat(ours), kind


@pytest.mark.parametrize("backend", THREE, indirect=True)
def test_the_queries_and_gauges_count_what_status_calls_ready(app: Errands, db_url: str) -> None:
    """Ready jobs count; delayed, blocked, running, stale jobs and a paused queue's jobs do not, on every backend."""

    @app.job(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    now = datetime.now(timezone.utc)
    hour, three_hours = now - timedelta(hours=1), now - timedelta(hours=3)
    # Held by a worker: claimed first, so their older due times must not make the backlog older.
    add.using(priority=9, run_at=three_hours).enqueue(1, 1)
    assert len(app.store.jobs.claim("w-running", ["default"], 1, 3600)) == 1
    add.using(priority=8, run_at=three_hours).enqueue(1, 2)
    assert len(app.store.jobs.claim("w-stale", ["default"], 1, -60)) == 1  # its lease already ran out
    later = add.using(delay=3600).enqueue(1, 3)  # delayed
    add.using(priority=5, run_at=three_hours, after=later).enqueue(1, 4)  # blocked: waits for `later`
    add.using(run_at=hour).enqueue(2, 1)  # the backlog: three ready jobs, the oldest due an hour ago
    add.enqueue(2, 2)
    add.enqueue(2, 3)
    add.using(queue="mails", run_at=now - timedelta(hours=5)).enqueue(3, 1)  # ready, but in a paused queue
    add.using(queue="mails").enqueue(3, 2)
    app.pause_queue("mails")

    done = run_cli(db_url, "status", "--json")
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    default, mails = status["queues"]["default"], status["queues"]["mails"]
    assert (default["ready"], default["delayed"], default["blocked"], default["running"], default["stale"]) == \
        (3, 1, 1, 1, 1)
    assert mails["ready"] == 2 and status["paused"] == ["mails"]

    dialect = app.store.dialect.name  # sqlite, postgresql or mysql: the page's names
    backlog, age = query(f"{dialect} backlog"), query(f"{dialect} age")
    assert scalar(app, backlog) == default["ready"] == 3
    sql_age = int(scalar(app, age))
    assert 3600 <= sql_age < 7200  # the ready job due an hour ago; the held and blocked ones are older
    assert scalar(app, backlog.replace("'default'", "'mails'")) == 0  # paused: no worker would take them
    assert scalar(app, age.replace("'default'", "'mails'")) == 0

    registry = CollectorRegistry()
    registry.register(ErrandsCollector(app))
    gauge = registry.get_sample_value
    assert gauge("errands_backlog_jobs", {"queue": "default"}) == 3
    assert sql_age <= gauge("errands_backlog_age_seconds", {"queue": "default"}) < 7200
    assert gauge("errands_backlog_jobs", {"queue": "mails"}) == 0
    assert gauge("errands_backlog_age_seconds", {"queue": "mails"}) == 0
    assert gauge("errands_jobs", {"queue": "mails", "state": "ready"}) == 2  # the dashboard's figure still shows them

    # The Prometheus sample's queries name these gauges for the queue the SQL samples name.
    prometheus = yaml.safe_load(marked("sample")["keda prometheus"][1])
    wanted = [re.fullmatch(r'max\((\w+)\{queue="(\w+)"\}\)', t["metadata"]["query"])
              for t in prometheus["spec"]["triggers"]]
    assert all(wanted), wanted
    assert [(m.group(1), m.group(2)) for m in wanted if m] == [("errands_backlog_jobs", "default"),
                                                               ("errands_backlog_age_seconds", "default")]


def parse_cli(args: list[str]) -> dict[str, Any]:
    """The options of the errands subcommand ``args`` names, parsed by the real CLI (nothing runs)."""
    ctx = main.make_context("errands", list(args), default_map={})
    _, rest, _ = main.make_parser(ctx).parse_args(list(args))
    command = main.get_command(ctx, rest[0])
    assert command is not None, rest[0]
    return command.make_context(rest[0], rest[1:], parent=ctx).params


def test_the_samples_parse_and_embed_the_tested_queries() -> None:
    samples = {name: yaml.safe_load(text) for name, (language, text) in marked("sample").items()
               if language == "yaml"}
    assert len(samples) == 4

    deployment = samples["deployment"]
    assert (deployment["apiVersion"], deployment["kind"]) == ("apps/v1", "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    command = pod["containers"][0]["command"]
    assert command[0] == "errands" and "sh" not in command  # errands itself receives Kubernetes' SIGTERM
    options = parse_cli(command[1:])
    assert options["shutdown_timeout"] == SHUTDOWN_TIMEOUT
    assert pod["terminationGracePeriodSeconds"] == options["shutdown_timeout"] + GRACE_MARGIN
    assert deployment["spec"]["selector"]["matchLabels"].items() <= deployment["spec"]["template"]["metadata"][
        "labels"].items()

    for name, dialect, value_key in (("keda postgresql", "postgresql", "targetQueryValue"),
                                     ("keda mysql", "mysql", "queryValue"),
                                     ("keda prometheus", None, "threshold")):
        scaled = samples[name]
        assert (scaled["apiVersion"], scaled["kind"]) == ("keda.sh/v1alpha1", "ScaledObject"), name
        assert scaled["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"], name
        triggers = scaled["spec"]["triggers"]
        for trigger in triggers:
            metadata = trigger["metadata"]
            assert all(isinstance(v, str) for v in metadata.values()), (name, metadata)  # KEDA wants strings
            assert float(metadata[value_key]) > 0, name
        if dialect is None:
            continue
        assert [t["type"] for t in triggers] == [dialect, dialect]
        assert flat(triggers[0]["metadata"]["query"]) == flat(query(f"{dialect} backlog")), name
        assert flat(triggers[1]["metadata"]["query"]) == flat(query(f"{dialect} age")), name
        assert triggers[1]["metricType"] == "Value"  # an age is not shared out among replicas


def test_the_cli_check_of_the_deployment_refuses_a_wrong_option() -> None:
    """Guards parse_cli: a misspelt option in the sample would fail, not pass silently."""
    assert parse_cli(["--app", "shop.tasks:app", "worker", "--queue", "default"])["queues"] == ("default",)
    with pytest.raises(click.UsageError):
        parse_cli(["worker", "--queues", "default"])
