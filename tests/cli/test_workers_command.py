"""``errands workers``: list the worker processes and quiet, resume or stop one or a host's, audited
with the actor "cli" (the store verbs run on every backend in the contract suite)."""

from __future__ import annotations

import json

from helpers import invoke_cli

from errands import Errands


def test_errands_workers_lists_quiets_resumes_and_stops(tmp_path):
    url = f"sqlite:///{tmp_path / 'cli.db'}"
    app = Errands(url)
    try:
        app.migrate()
        for worker_id, host in (("a:1:x", "host-a"), ("a:2:y", "host-a"), ("b:3:z", "host-b")):
            app.store.workers.register(worker_id, host, 1, ["default"], 1, lease=30.0, heartbeat_every=10.0)

        quiet = invoke_cli(url, "workers", "quiet", "a:1:x")
        assert quiet.returncode == 0 and "worker a:1:x: quiet" in quiet.stdout
        app.store.workers.heartbeat("a:1:x", 0, "quiet")
        listed = invoke_cli(url, "workers", "list").stdout.splitlines()
        assert [line.split()[:2] for line in listed] == [["a:1:x", "quiet"], ["a:2:y", "running"],
                                                          ["b:3:z", "running"]]
        assert invoke_cli(url, "workers", "resume", "a:1:x").returncode == 0
        stop = invoke_cli(url, "workers", "stop", "--host", "host-a")
        assert stop.returncode == 0 and "worker a:2:y: stop" in stop.stdout
        rows = {w["id"]: w for w in json.loads(invoke_cli(url, "workers", "list", "--json").stdout)}
        assert [rows[i]["state"] for i in ("a:1:x", "a:2:y", "b:3:z")] == ["stop requested"] * 2 + ["running"]
        assert "worker a:2:y alive, stop requested:" in invoke_cli(url, "status").stdout

        refused = invoke_cli(url, "workers", "resume", "a:1:x")
        assert refused.returncode == 1 and "a stop cannot be taken back" in refused.stderr
        assert invoke_cli(url, "workers", "quiet", "nobody").returncode == 1
        assert invoke_cli(url, "workers", "quiet").returncode == 2  # neither an id nor --host
        assert invoke_cli(url, "workers", "quiet", "a:1:x", "--host", "host-a").returncode == 2
        audit = [(e.actor, e.action, e.target) for e in reversed(app.store.accounts.audit_log())]
        assert audit == [("cli", "quiet", "worker a:1:x"), ("cli", "resume", "worker a:1:x"),
                         ("cli", "stop", "host host-a")]
    finally:
        app.close()
