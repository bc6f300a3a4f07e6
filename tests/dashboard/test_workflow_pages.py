"""The workflow pages and their API on every backend: the graph drawn as SVG on the server (a node
per step, edges, links, state classes, aggregated columns for a 1,000-step fan-out), the steps
table, the links from member jobs, the list, and cancelling (admins only, CSRF, a confirmation,
an audit line)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from conftest import ADMIN, VIEWER, csrf, login
from helpers import drain

from errands import JobState, group

NODE = re.compile(r'<a href="([^"]*)" class="wf-node state-(\w+)( wf-aggregate)?" data-state="\w+" '
                  r'aria-label="([^"]*)">')


@pytest.fixture
def steps(dash_app: Any) -> Any:
    class Steps:
        broken: set[int] = set()

    @dash_app.job(name="fetch")
    def fetch(n: int) -> int:
        return n

    @dash_app.job(name="fragile", max_attempts=1)
    def fragile(n: int) -> int:
        if n in Steps.broken:
            raise ValueError(f"step {n} broke")
        return n

    @dash_app.job(name="merge")
    def merge(*values: Any) -> int:
        return len(values)

    Steps.broken = set()
    Steps.fetch, Steps.fragile, Steps.merge = fetch, fragile, merge  # type: ignore[attr-defined]
    return Steps


def _diamond(app: Any, steps: Any, name: str = "diamond") -> tuple[Any, dict[str, Any]]:
    """fetch -> (fragile 1, fragile 2) -> merge, with fragile 2 broken: after a drain one step
    succeeded twice, one failed, and merge stays blocked."""
    steps.broken.add(2)
    wf = app.workflow(name)
    top = wf.add(steps.fetch.prepare(0))
    left = wf.add(steps.fragile.prepare(1), after=[top])
    right = wf.add(steps.fragile.prepare(2), after=[top])
    bottom = wf.add(steps.merge.prepare(), after=[left, right])
    handle = wf.enqueue()
    return handle, {"top": top.job.id, "left": left.job.id, "right": right.job.id, "bottom": bottom.job.id}


def _nodes(html: str) -> list[tuple[str, str, bool, str]]:
    return [(href, state, bool(agg), label) for href, state, agg, label in NODE.findall(html)]


def test_the_page_draws_each_step_as_a_linked_node_with_its_state(web, dash_app, steps):
    handle, ids = _diamond(dash_app, steps)
    drain(dash_app)
    login(web)
    page = web.get(f"/workflows/{handle.id}")
    assert page.status_code == 200
    html = page.text
    assert '<svg class="wf-graph"' in html and "<script>" not in html  # drawn by the server, no inline script
    nodes = _nodes(html)
    assert len(nodes) == 4
    by_href = {href: (state, label) for href, state, _, label in nodes}
    assert by_href[f"/jobs/{ids['top']}"][0] == "succeeded"
    assert by_href[f"/jobs/{ids['left']}"][0] == "succeeded"
    assert by_href[f"/jobs/{ids['right']}"] == ("failed", f"#{ids['right']} fragile: failed (ValueError: step 2 broke)")
    assert by_href[f"/jobs/{ids['bottom']}"][0] == "blocked"
    assert html.count('class="wf-edge"') == 4  # top->left, top->right, left->bottom, right->bottom
    assert f"<title>#{ids['top']} fetch: succeeded</title>" in html
    # Columns are longest paths from the root: top, then both sides, then the bottom.
    xs = {href: float(x) for href, x in re.findall(r'<a href="([^"]*)" class="wf-node[^>]*><title>[^<]*</title>'
                                                   r'<rect class="box" x="([0-9.]+)"', html)}
    assert xs[f"/jobs/{ids['top']}"] < xs[f"/jobs/{ids['left']}"] == xs[f"/jobs/{ids['right']}"] \
        < xs[f"/jobs/{ids['bottom']}"]
    assert f"Workflow #{handle.id} <small>diamond</small>" in html
    assert "◇ blocked" in html  # the workflow's state badge: a dead step holds the rest
    assert "policy" in html.lower() and "block" in html
    assert f'href="/jobs/{ids["right"]}">{ids["right"]}</a>' in html  # the steps table
    assert "ValueError: step 2 broke" in html


def test_member_jobs_link_to_their_workflow_wherever_they_are(web, dash_app, steps):
    handle, ids = _diamond(dash_app, steps)
    drain(dash_app)
    batch = dash_app.batch([steps.fetch.prepare(9)])
    login(web)
    link = f'<a href="/workflows/{handle.id}">Workflow #{handle.id}</a>'
    for job_id in (ids["bottom"], ids["right"], ids["top"]):  # waiting, in the dead letter, ended with its result
        page = web.get(f"/jobs/{job_id}").text
        assert link in page, job_id
    assert f'<a href="/workflows/{batch.id}">Batch #{batch.id}</a>' in web.get(f"/jobs/{batch.jobs[0].id}").text
    assert web.get(f"/api/jobs/{ids['right']}").json()["workflow"] == {"id": handle.id, "kind": "workflow",
                                                                       "name": "diamond"}
    plain = steps.fetch.enqueue(1)
    assert "Part of" not in web.get(f"/jobs/{plain.id}").text


def test_a_thousand_step_fan_out_is_drawn_as_one_node_per_crowded_column(web, dash_app, steps):
    steps.broken.update(range(0, 1000, 100))  # 10 of the 1,000 fail
    wf = dash_app.workflow("fan")
    root = wf.add(steps.fetch.prepare(0))
    middle = wf.add(group(*[steps.fragile.prepare(n) for n in range(1000)]), after=[root])
    wf.add(steps.merge.prepare(), after=[middle])
    handle = wf.enqueue()
    drain(dash_app, concurrency=4)
    login(web)
    page = web.get(f"/workflows/{handle.id}")
    html = page.text
    nodes = _nodes(html)
    assert len(nodes) == 3 and [agg for _, _, agg, _ in nodes] == [False, True, False]
    href, state, _, label = nodes[1]
    assert href == "?layer=1#steps" and state == "failed"
    assert label == "1,000 steps: 990 succeeded, 10 failed"
    assert ">990 succeeded, 10 failed<" in html
    assert html.count('class="wf-edge"') == 2 and html.count('class="wf-seg ') == 2
    assert len(page.content) < 200_000  # the page stays small: 3 boxes and a page of 100 steps
    assert html.count("<tr><td>") == 100 and "page 1 of 11" in html
    failed = web.get(f"/workflows/{handle.id}?layer=1&state=failed").text
    assert failed.count("<tr><td>") == 10 and "step 100 broke" in failed
    last = web.get(f"/workflows/{handle.id}?page=11").text
    assert last.count("<tr><td>") == 2  # 1,002 steps: 100 a page


def test_a_batch_without_step_rows_is_drawn_by_its_members(web, dash_app, steps):
    batch = dash_app.batch([steps.fetch.prepare(n) for n in range(3)])
    chain = dash_app.chain(steps.fetch.prepare(1), steps.fetch.prepare(2))
    login(web)
    html = web.get(f"/workflows/{batch.id}").text
    assert "Batch #" in html and len(_nodes(html)) == 3 and 'class="wf-edge"' not in html
    assert {state for _, state, _, _ in _nodes(html)} == {"ready"}
    chained = web.get(f"/workflows/{chain.id}").text
    assert "Chain #" in chained and len(_nodes(chained)) == 2 and chained.count('class="wf-edge"') == 1


def test_a_viewer_sees_no_cancel_and_cannot_cancel(web, dash_app, steps):
    handle, _ = _diamond(dash_app, steps)
    login(web, VIEWER)
    page = web.get(f"/workflows/{handle.id}").text
    assert "/cancel" not in page
    refused = web.post(f"/workflows/{handle.id}/cancel", data={"csrf": csrf(web), "confirm": "1"})
    assert refused.status_code == 403
    api = web.post(f"/api/workflows/{handle.id}/cancel", headers={"X-CSRF-Token": csrf(web)})
    assert api.status_code == 403
    assert all(s.state is not JobState.CANCELLED for s in dash_app.workflows.status(handle.id).steps)


def test_an_admin_cancels_what_has_not_run_after_confirming_and_it_is_audited(web, dash_app, steps):
    handle, ids = _diamond(dash_app, steps)
    login(web)
    page = web.get(f"/workflows/{handle.id}").text
    assert f'action="/workflows/{handle.id}/cancel"' in page and "Cancel workflow…" in page
    assert web.post(f"/workflows/{handle.id}/cancel", data={"confirm": "1"}).status_code == 403  # no CSRF token
    ask = web.post(f"/workflows/{handle.id}/cancel", data={"csrf": csrf(web)})
    assert ask.status_code == 200 and "4 step(s) that have not started will be cancelled" in ask.text
    assert dash_app.workflows.status(handle.id).state == "running"  # asking changed nothing
    done = web.post(f"/workflows/{handle.id}/cancel", data={"csrf": csrf(web), "confirm": "1"},
                    follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/workflows/{handle.id}?done=cancelled%3A4"
    status = dash_app.workflows.status(handle.id)
    assert status.state == "cancelled" and {s.state for s in status.steps} == {JobState.CANCELLED}
    [entry] = [e for e in web.get("/api/audit").json()["entries"] if e["action"] == "cancel"]
    assert (entry["actor"], entry["target"], entry["detail"]) == (ADMIN, f"workflow {handle.id}", "4 step(s) cancelled")
    after = web.get(done.headers["location"]).text
    assert "Done: cancelled:4" in after and "/cancel" not in after  # nothing left to cancel
    assert len([n for n in _nodes(after) if n[1] == "cancelled"]) == 4
    assert web.post("/workflows/999999/cancel", data={"csrf": csrf(web), "confirm": "1"}).status_code == 404
    assert ids


def test_the_list_shows_recent_workflows_with_state_and_progress(web, dash_app, steps):
    handle, _ = _diamond(dash_app, steps, "first")
    done = dash_app.chain(steps.fetch.prepare(1), steps.fetch.prepare(2))
    drain(dash_app)
    cancelled = dash_app.workflow("stopped")
    cancelled.add(steps.fetch.prepare(3))
    stopped = cancelled.enqueue()
    dash_app.workflows.cancel(stopped.id)
    login(web)
    html = web.get("/workflows").text
    for wf_id in (handle.id, done.id, stopped.id):
        assert f'<a href="/workflows/{wf_id}">{wf_id}</a>' in html
    data = {w["id"]: w for w in web.get("/api/workflows").json()["workflows"]}
    # The diamond's dead step holds its last step: blocked in the list as on its page (issue 26: "running").
    assert [data[i]["state"] for i in (handle.id, done.id, stopped.id)] == ["blocked", "succeeded", "cancelled"]
    assert (data[handle.id]["done"], data[handle.id]["failed"], data[handle.id]["pending"]) == (2, 1, 1)
    assert data[done.id]["percent"] == 100.0 and data[done.id]["kind"] == "chain"
    page = web.get("/api/workflows?limit=2").json()
    assert [w["id"] for w in page["workflows"]] == [stopped.id, done.id] and page["next_before_id"] == done.id
    older = web.get(f"/api/workflows?limit=2&before={page['next_before_id']}").json()
    assert [w["id"] for w in older["workflows"]] == [handle.id]
    assert 'href="/workflows"' in web.get("/").text  # reachable from the overview


def test_the_api_returns_a_workflow_with_its_steps_and_cancels_it(web, dash_app, steps):
    handle, ids = _diamond(dash_app, steps)
    drain(dash_app)
    login(web)
    data = web.get(f"/api/workflows/{handle.id}").json()
    assert {k: data[k] for k in ("id", "kind", "name", "policy", "state", "total", "done", "failed", "pending")} == {
        "id": handle.id, "kind": "workflow", "name": "diamond", "policy": "block", "state": "blocked", "total": 4,
        "done": 2, "failed": 1, "pending": 1}
    assert data["percent"] == 75.0 and data["created_at"] and data["completed_at"] is None
    by_id = {s["id"]: s for s in data["steps"]}
    assert by_id[ids["bottom"]] == {"id": ids["bottom"], "position": 3, "label": "merge", "state": "blocked",
                                    "parents": [ids["left"], ids["right"]], "layer": 2, "error": None}
    assert by_id[ids["right"]]["error"] == "ValueError: step 2 broke" and by_id[ids["top"]]["layer"] == 0
    assert web.get("/api/workflows/999999").status_code == 404
    assert web.get("/api/workflows/0").status_code == 400
    assert web.get("/api/workflows/abc").status_code == 400
    assert web.post(f"/api/workflows/{handle.id}/cancel").status_code == 403  # no CSRF token
    cancelled = web.post(f"/api/workflows/{handle.id}/cancel", headers={"X-CSRF-Token": csrf(web)})
    assert cancelled.json() == {"workflow_id": handle.id, "cancelled": 1}
    assert web.get(f"/api/workflows/{handle.id}").json()["state"] == "failed"  # a dead step and a cancelled one
    assert web.post("/api/workflows/999999/cancel", headers={"X-CSRF-Token": csrf(web)}).status_code == 404
    [entry] = [e for e in web.get("/api/audit").json()["entries"] if e["action"] == "cancel"]
    assert (entry["actor"], entry["target"]) == (ADMIN, f"workflow {handle.id}")


def test_the_openapi_document_describes_the_workflow_endpoints(web):
    doc = web.get("/api/openapi.json").json()
    assert set(doc["paths"]["/api/workflows/{workflow_id}"]) == {"get"}
    cancel = doc["paths"]["/api/workflows/{workflow_id}/cancel"]["post"]
    assert any(p["name"] == "X-CSRF-Token" for p in cancel["parameters"])
    assert cancel["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/WorkflowCancelled"}
    schemas = doc["components"]["schemas"]
    assert set(schemas["WorkflowView"]["properties"]) >= {"id", "kind", "name", "policy", "state", "total", "done",
                                                          "failed", "pending", "percent", "created_at",
                                                          "completed_at", "steps"}
    assert set(schemas["WorkflowStep"]["properties"]) == {"id", "position", "label", "state", "parents", "layer",
                                                          "error"}
    assert "/api/workflows" in doc["paths"]


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)  # new SQL: the list's reads
def test_a_workflow_that_cannot_finish_shows_its_state_not_a_percentage(web, dash_app, steps):
    # Issue 26: a blocked workflow read "75.0%", as if three quarters through.
    handle, _ = _diamond(dash_app, steps)
    drain(dash_app)
    login(web)
    page = web.get(f"/workflows/{handle.id}").text
    row = re.search(r"<dt>Progress</dt><dd>(.*?)</dd>", page).group(1)
    assert "<progress" not in row and "%" not in row
    assert "blocked: 2 of 4 steps succeeded, 1 failed, 1 waiting" in row
    listed = re.search(rf'<tr><td><a href="/workflows/{handle.id}">.*?</tr>', web.get("/workflows").text, re.S).group(0)
    assert "<progress" not in listed and "blocked: 2 of 4 steps succeeded, 1 failed, 1 waiting" in listed
    assert "blocked" in web.get(f"/api/workflows/{handle.id}").json()["progress"]


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # the template decides it
def test_the_steps_table_names_its_stage_column(web, dash_app, steps):
    # Issue 26: the steps table had a "Column" heading nothing explained.
    handle, _ = _diamond(dash_app, steps)
    login(web)
    page = web.get(f"/workflows/{handle.id}").text
    headings = re.findall(r'<th scope="col">([^<]*)</th>', page.split('id="steps"')[1])
    assert headings == ["#", "Job", "Label", "State", "Stage", "Waits for", "Error"]
    assert "A step's stage is the graph's column it is drawn in" in page
    assert "in stage 1" in web.get(f"/workflows/{handle.id}?layer=1").text


@pytest.mark.parametrize("backend", ["sqlite", "postgres", "mariadb"], indirect=True)  # new SQL: the list's reads
def test_under_the_cancel_policy_cancelled_steps_count_as_cancelled(web, dash_app, steps):
    # Issue 26: the steps cancelled after a dead one were counted as failed.
    steps.broken.add(1)
    wf = dash_app.workflow("nightly", policy="cancel")
    first = wf.add(steps.fragile.prepare(1))
    side = wf.add(steps.fetch.prepare(2))
    then = wf.add(steps.fetch.prepare(3), after=[first])
    wf.add(steps.merge.prepare(), after=[then, side])
    handle = wf.enqueue()
    drain(dash_app)
    row = dash_app.workflows.status(handle.id)
    assert (row.state, row.batch.done, row.failed, row.cancelled) == ("failed", 1, 1, 2)
    login(web)
    view = web.get(f"/api/workflows/{handle.id}").json()
    [listed] = [w for w in web.get("/api/workflows").json()["workflows"] if w["id"] == handle.id]
    for data in (view, listed):
        assert (data["state"], data["done"], data["failed"], data["cancelled"], data["pending"]) == (
            "failed", 1, 1, 2, 0)
        assert data["progress"] == "failed: 1 of 4 steps succeeded, 1 failed, 2 cancelled"
    assert "failed: 1 of 4 steps succeeded, 1 failed, 2 cancelled" in web.get(f"/workflows/{handle.id}").text
