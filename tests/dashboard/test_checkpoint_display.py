"""A job's checkpoint (shortened, escaped) and its resumptions on the job page, in the JSON API and in
``errands job show``, for a live job and for one in the dead letter (which keeps its checkpoint)."""

from __future__ import annotations

import json

import pytest
from conftest import login
from helpers import invoke_cli

from errands.core.endings import Buried, Resumed
from errands.core.payload import encode_checkpoint

# What is shown is read through the same store verbs on every backend (their contract tests hold them).
pytestmark = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def test_the_checkpoint_and_resumptions_are_shown_shortened(web, dash_app, migrated_url):
    job = dash_app.registry["mail"].enqueue("x@example.com")
    store = dash_app.store
    store.jobs.claim("w1", ["mails"], 1, 30)
    assert store.features.set_checkpoint("w1", job.id, encode_checkpoint({"after": 41, "note": "<b>" + "x" * 900}))
    assert store.endings.apply("w1", [Resumed(job.id)]) == [Resumed(job.id)]
    login(web)
    detail = web.get(f"/api/jobs/{job.id}").json()
    assert detail["resumptions"] == 1 and detail["checkpoint"].startswith('{"after":41,"note":"<b>xxx')
    assert len(detail["checkpoint"]) == 500 and detail["checkpoint"].endswith("…")
    page = web.get(f"/jobs/{job.id}").text
    assert "Checkpoint" in page and "&lt;b&gt;xxx" in page and "<b>xxx" not in page and "Resumptions" in page
    shown = invoke_cli(migrated_url, "job", "show", str(job.id), "--json")
    info = json.loads(shown.stdout)
    assert info["resumptions"] == 1 and info["checkpoint"] == detail["checkpoint"]

    store.jobs.claim("w1", ["mails"], 1, 30)
    assert store.endings.apply("w1", [Buried(job.id, 1, "E", "boom")])
    dead = web.get(f"/api/jobs/{job.id}").json()
    assert dead["where"] == "failed" and dead["checkpoint"] == detail["checkpoint"]
    assert "Checkpoint" in web.get(f"/jobs/{job.id}").text
    text = invoke_cli(migrated_url, "job", "show", str(job.id)).stdout
    assert "checkpoint: {\"after\":41" in text


def test_a_checkpoint_and_resumptions_written_by_hand_still_show(web, dash_app, migrated_url):
    job = dash_app.registry["mail"].enqueue("x@example.com")
    store = dash_app.store
    store.db.run(lambda cur: cur.execute(store.dialect.q("UPDATE {jobs} SET checkpoint = {p}, resumptions = {p} "
                                                         "WHERE id = {p}"), ("{not json\x00", "many", job.id)),
                 write=True)
    login(web)
    detail = web.get(f"/api/jobs/{job.id}").json()
    assert detail["checkpoint"] == "{not json\ufffd" and detail["resumptions"] == 0
    assert web.get(f"/jobs/{job.id}").status_code == 200
    shown = invoke_cli(migrated_url, "job", "show", str(job.id))
    assert shown.returncode == 0
    assert "{not json" in shown.stdout
