"""Hostile input to the dashboard, on every backend (issue 11, cases 5 and 6).

What a person or a program sends (a delay of 1e308, a job id of 2**64, 5,000 nested brackets, a
queue name with a final newline) is refused with a 400 or a form error, never a 500; and whatever
a row holds (written here with raw SQL, as another program, an older errands or a disk could: a job
due in the year 33,000, a payload that is no JSON or no UTF-8, a name with bytes that are no
UTF-8) still renders on every page and in every JSON response.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

from errands import Errands
from errands.core.limits import ID_MAX, MAX_DELAY
from errands.core.payload import MAX_DEPTH
from errands.dashboard import AuthSettings, create_dashboard
from errands.services.operator import DISPLAY_DEPTH
from errands.services.passwords import hash_password

ADMIN, PASSWORD = "ada", "correct horse battery"
_HASH = hash_password(PASSWORD)
GOOD_PAYLOAD = '{"args":["a@b.c"],"kwargs":{}}'
HUGE_IDS = [str(ID_MAX + 1), str(2**64), "1" + "0" * 30, "0", "-1"]


class Sql(str):
    """A column value written into the statement as an SQL expression, not sent as a parameter."""


@pytest.fixture
def dash_app(app: Errands) -> Errands:
    app.store.accounts.create_user(ADMIN, _HASH, "admin")

    @app.job(name="mail", queue="mails")
    def mail(to: Any, subject: str = "hi") -> None: ...

    return app


@pytest.fixture
def web(dash_app: Errands) -> Iterator[TestClient]:
    with TestClient(create_dashboard(dash_app, settings=AuthSettings()), base_url="https://testserver",
                    raise_server_exceptions=False) as client:
        signed_in = client.post("/login", data={"username": ADMIN, "password": PASSWORD}, follow_redirects=False)
        assert signed_in.status_code == 303
        client.headers["X-CSRF-Token"] = client.get("/api/me").json()["csrf"]
        yield client


def token(web: TestClient) -> str:
    return str(web.headers["X-CSRF-Token"])


def insert_row(app: Errands, table: str, **columns: Any) -> int:
    """A row written by hand into ``table`` ("jobs" or "failed"); its id."""
    store = app.store
    names, marks, params = [], [], []
    for column, value in columns.items():
        names.append(column)
        if isinstance(value, Sql):
            marks.append(str(value))
        else:
            marks.append("{p}")
            params.append(value)
    statement = store.dialect.q(f"INSERT INTO {{{table}}} ({', '.join(names)}) VALUES ({', '.join(marks)})")

    def insert(cur: Any) -> int:
        cur.execute(statement, params)
        cur.execute(store.dialect.q(f"SELECT MAX(id) FROM {{{table}}}"))
        return int(cur.fetchone()[0])

    return store.db.run(insert, write=True)


def insert_job(app: Errands, **columns: Any) -> int:
    row: dict[str, Any] = {"queue": "mails", "name": "mail", "payload": GOOD_PAYLOAD, "priority": 0, "attempts": 0,
                           "max_attempts": 3, "available_at": Sql("{now}"), "created_at": Sql("{now}")}
    row.update(columns)
    return insert_row(app, "jobs", **row)


_next_failed = [5000]


def insert_failed(app: Errands, **columns: Any) -> int:
    _next_failed[0] += 1
    row: dict[str, Any] = {"id": _next_failed[0], "queue": "mails", "name": "mail", "payload": GOOD_PAYLOAD,
                           "priority": 0, "attempts": 3, "max_attempts": 3, "created_at": Sql("{now}"),
                           "failed_at": Sql("{now}"), "error_type": "RuntimeError", "error_message": "it broke"}
    row.update(columns)
    return insert_row(app, "failed", **row)


def far_future(backend: str) -> Sql:
    """A time beyond Python's dates (or at their very end, where the database stops first)."""
    return Sql({"sqlite": "1e12", "postgres": "(now() + make_interval(secs => 1e12))"}
               .get(backend, "'9999-12-31 23:59:59'"))


def far_past(backend: str) -> Sql | None:
    # PostgreSQL stops at 4713 BC: 1e11 seconds ago is about 1150 BC, before Python's year 1.
    return {"sqlite": Sql("-1e12"), "postgres": Sql("(now() - make_interval(secs => 1e11))")}.get(backend)


def no_server_error(response: Any, what: str = "") -> Any:
    assert response.status_code < 500, (what, response.status_code, response.text[-1500:])
    assert "Traceback" not in response.text
    return response


def form_error(response: Any) -> str:
    """The error a page states (the enqueue form's, or an error page's), unescaped."""
    found = re.search(r'<p class="error" role="alert">(.*?)</p>|<p role="alert">(.*?)</p>', response.text, re.S)
    assert found, response.text[-1500:]
    return html.unescape(found.group(1) or found.group(2))


def jobs_stored(app: Errands) -> int:
    return len(app.store.jobs.list_jobs(limit=1000))


# ---------------------------------------------------------------------------------- case 5: far-future delays
BAD_API_DELAYS = [b"1e12", b"1e308", b"1e999", b"-1e999", b"Infinity", b"-Infinity", b"NaN", b"-1",
                  str(MAX_DELAY + 1).encode(), b'"60"', b'"soon"', b"true", b"[]"]


def test_api_enqueue_refuses_far_and_bad_delays_with_400(web, dash_app):
    for delay in BAD_API_DELAYS:
        body = b'{"job": "mail", "args": ["a@b.c"], "delay": ' + delay + b"}"
        response = no_server_error(web.post("/api/enqueue", content=body,
                                            headers={"Content-Type": "application/json"}), delay)
        assert response.status_code == 400, (delay, response.text)
        assert "delay" in response.json()["error"], (delay, response.text)
    assert jobs_stored(dash_app) == 0
    ok = web.post("/api/enqueue", json={"job": "mail", "args": ["a@b.c"], "delay": MAX_DELAY})
    assert ok.status_code == 200, ok.text
    assert jobs_stored(dash_app) == 1


BAD_FORM_DELAYS = ["1e12", "1e308", "1e400", "inf", "-inf", "Infinity", "nan", "NaN", "-1", "soon", "0x10",
                   str(MAX_DELAY + 1)]


def test_enqueue_form_refuses_far_and_bad_delays_with_a_form_error(web, dash_app):
    for delay in BAD_FORM_DELAYS:
        response = no_server_error(web.post("/enqueue", data={"csrf": token(web), "job": "mail",
                                                              "args": '["a@b.c"]', "kwargs": "{}", "delay": delay}),
                                   delay)
        assert response.status_code == 400, (delay, response.text[-500:])
        assert "delay" in form_error(response), delay
        assert f'value="{delay}"' in response.text  # the form comes back as it was sent
    assert jobs_stored(dash_app) == 0


def test_bad_copies_and_confirm_counts_are_refused_not_500(web, dash_app):
    for copies in ("1" + "0" * 30, "-1", "0", "1e3", "two", "9" * 5000):
        response = no_server_error(web.post("/enqueue", data={"csrf": token(web), "job": "mail",
                                                              "args": '["a@b.c"]', "copies": copies}), copies)
        assert response.status_code == 400 and "copies" in form_error(response), copies
    for copies in (2**64, -1, 1.5, "3", True):
        response = no_server_error(web.post("/api/enqueue", json={"job": "mail", "args": ["a"], "copies": copies}))
        assert response.status_code == 400 and "copies" in response.json()["error"], copies
    assert jobs_stored(dash_app) == 0
    entry = insert_failed(dash_app)
    for confirm in ("1e3", "9" * 5000, "-1", "x"):
        response = no_server_error(web.post("/dead/forget", data={"csrf": token(web), "id": str(entry),
                                                                  "confirm": confirm}), confirm)
        assert response.status_code == 400 and "confirm" in form_error(response), confirm
    for confirm in (2**64, "1", 1.0, True):
        response = no_server_error(web.post("/api/dead/forget", json={"ids": [entry], "confirm": confirm}))
        assert response.status_code == 400 and "confirm" in response.json()["error"], confirm
    assert [r.id for r in dash_app.failed()] == [entry]


# ---------------------------------------------------------------------------------- case 5: nesting
def _nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_deeply_nested_arguments_are_refused_with_400(web, dash_app):
    for depth in (MAX_DEPTH + 1, 5000, 100_000):
        args = f"[{_nested(depth)}]"
        form = no_server_error(web.post("/enqueue", data={"csrf": token(web), "job": "mail", "args": args}), depth)
        assert form.status_code == 400 and "nest" in form_error(form), depth
        kwargs = '{"to": ' + _nested(depth) + "}"
        form = no_server_error(web.post("/enqueue", data={"csrf": token(web), "job": "mail", "kwargs": kwargs}))
        assert form.status_code == 400 and "nest" in form_error(form), depth
        body = '{"job": "mail", "args": ' + args + "}"
        api = no_server_error(web.post("/api/enqueue", content=body, headers={"Content-Type": "application/json"}))
        assert api.status_code == 400 and "nest" in api.json()["error"], depth
        body = '{"job": "mail", "kwargs": {"to": ' + _nested(depth) + "}}"
        api = no_server_error(web.post("/api/enqueue", content=body, headers={"Content-Type": "application/json"}))
        assert api.status_code == 400 and "nest" in api.json()["error"], depth
    assert jobs_stored(dash_app) == 0
    # As deep as a job's arguments may nest: accepted by the form and by the API alike.
    deepest = f"[{_nested(MAX_DEPTH)}]"
    form = web.post("/enqueue", data={"csrf": token(web), "job": "mail", "args": deepest}, follow_redirects=False)
    assert form.status_code == 303, form.text[-500:]
    api = web.post("/api/enqueue", content='{"job": "mail", "args": ' + deepest + "}",
                   headers={"Content-Type": "application/json"})
    assert api.status_code == 200, api.text
    assert jobs_stored(dash_app) == 2


# ---------------------------------------------------------------------------------- case 5: huge integers
def test_out_of_range_job_ids_answer_400_or_404(web, dash_app):
    entry = insert_failed(dash_app)
    for job_id in HUGE_IDS:
        for path in (f"/jobs/{job_id}", f"/api/jobs/{job_id}"):
            response = no_server_error(web.get(path), path)
            assert response.status_code in (400, 404), (path, response.status_code)
        response = no_server_error(web.post(f"/jobs/{job_id}/cancel", data={"csrf": token(web)}), job_id)
        assert response.status_code in (400, 404), (job_id, response.status_code)
        response = no_server_error(web.post(f"/api/jobs/{job_id}/cancel"), job_id)
        assert response.status_code in (400, 404) and "job id" in response.json()["error"], (job_id, response.text)
        response = no_server_error(web.post("/dead/retry", data={"csrf": token(web), "id": job_id, "confirm": "1"}))
        assert response.status_code == 400, job_id
    for ids in ([ID_MAX + 1], [2**64], [0], [-1], [entry, 10**30]):
        response = no_server_error(web.post("/api/dead/retry", json={"ids": ids, "confirm": len(ids)}))
        assert response.status_code == 400 and "ids" in response.json()["error"], ids
    response = no_server_error(web.post("/dead/retry", data={"csrf": token(web), "id": "\u00b2", "confirm": "1"}))
    assert response.status_code == 400  # a digit to str.isdigit, no digit to int()
    assert [r.id for r in dash_app.failed()] == [entry]
    # The largest id there can be is a valid id that names no job.
    assert no_server_error(web.get(f"/api/jobs/{ID_MAX}")).status_code == 404
    assert no_server_error(web.get(f"/jobs/{ID_MAX}")).status_code == 404
    assert no_server_error(web.post(f"/api/jobs/{ID_MAX}/cancel")).json() == {"outcome": "gone"}


def test_out_of_range_keyset_cursors_and_limits_answer_400(web, dash_app):
    dash_app.registry["mail"].enqueue("a@b.c")
    for value in HUGE_IDS:
        for path in (f"/jobs?before={value}", f"/jobs?after={value}&sort=oldest", f"/stale?before={value}",
                     f"/api/jobs?before={value}", f"/api/jobs?after={value}&sort=oldest", f"/dead?before={value}",
                     f"/api/dead?before={value}", f"/audit?before={value}", f"/api/audit?before={value}",
                     f"/jobs?before={value}&q=a", f"/api/dead?before={value}&name=mail"):
            response = no_server_error(web.get(path), path)
            assert response.status_code == 400, (path, response.status_code)
    for limit in ("0", "-5", "1" + "0" * 30, "1e3"):
        for path in (f"/api/jobs?limit={limit}", f"/api/dead?limit={limit}"):
            response = no_server_error(web.get(path), path)
            assert response.status_code in (200, 400), (path, response.status_code)
            if limit != "1" + "0" * 30:
                assert response.status_code == 400, path
    assert web.get(f"/api/jobs?before={ID_MAX}").json()["count"] == 1
    # Filters are text: a NUL (which PostgreSQL cannot hold) or a byte that is no UTF-8 matches nothing.
    for path in ("/jobs?q=%00", "/jobs?queue=%00", "/api/jobs?name=a%00", "/dead?q=%00", "/api/dead?queue=%00",
                 "/jobs?q=%FF%FE", "/users?q=%00", "/api/users?q=%00"):
        response = no_server_error(web.get(path), path)
        assert response.status_code == 200, (path, response.text[-500:])


# ---------------------------------------------------------------------------------- case 5: rows that hold anything
def _shows_everywhere(web: TestClient, job_id: int, where: str = "jobs") -> dict[str, Any]:
    """Every page and API response that shows ``job_id`` answers 200; the job's API detail."""
    pages = ["/", "/queues", "/api/overview", "/api/queues"]
    pages += ["/jobs", "/jobs?sort=oldest", "/jobs?queue=mails", "/api/jobs", "/stale"] if where == "jobs" \
        else ["/dead", "/api/dead", "/dead?q=a"]
    for path in pages:
        response = web.get(path)
        assert response.status_code == 200, (path, response.status_code, response.text[-1500:])
    listing = web.get("/api/jobs" if where == "jobs" else "/api/dead").json()
    assert job_id in [j["id"] for j in listing["jobs" if where == "jobs" else "entries"]]
    listing_html = web.get("/jobs" if where == "jobs" else "/dead").text
    assert f'href="/jobs/{job_id}"' in listing_html
    page = web.get(f"/jobs/{job_id}")
    assert page.status_code == 200, page.text[-1500:]
    detail = web.get(f"/api/jobs/{job_id}")
    assert detail.status_code == 200, detail.text[-1500:]
    json.loads(detail.content.decode("utf-8"))  # valid UTF-8 and valid JSON
    return dict(detail.json(), page=page.text)


def test_a_job_due_after_python_s_last_date_shows_everywhere(web, dash_app, backend):
    job_id = insert_job(dash_app, available_at=far_future(backend))
    detail = _shows_everywhere(web, job_id)
    assert detail["state"] == "delayed" and detail["available_at"].startswith("9999-12-31")
    assert "9999-12-31" in detail["page"]
    assert any("scheduled for later" in reason for reason in detail["why"])
    delayed = web.get("/api/jobs?state=delayed").json()
    assert [j["id"] for j in delayed["jobs"]] == [job_id]
    assert f'href="/jobs/{job_id}"' in web.get("/jobs?state=delayed").text
    assert web.get("/api/overview").json()["totals"]["delayed"] == 1
    past = far_past(backend)
    if past is not None:
        old = insert_job(dash_app, available_at=past, created_at=past)
        detail = _shows_everywhere(web, old)
        assert detail["state"] == "ready" and detail["available_at"].startswith("0001-01-01")
        entry = insert_failed(dash_app, created_at=past, failed_at=far_future(backend))
        assert _shows_everywhere(web, entry, "failed")["failed_at"].startswith("9999-12-31")


def test_enqueued_then_listed_with_the_longest_delay_allowed(web, dash_app):
    ids = web.post("/api/enqueue", json={"job": "mail", "args": ["a"], "delay": MAX_DELAY}).json()["ids"]
    detail = _shows_everywhere(web, ids[0])
    assert detail["state"] == "delayed"


def _bad_payloads(backend: str) -> dict[str, Any]:
    payloads: dict[str, Any] = {
        "not JSON": '{"args": [1,',
        "100,000 deep": '{"args": [' + _nested(100_000) + "]}",
        "990 deep": '{"args": [' + _nested(990) + '], "kwargs": {}}',
        "deep, still shown decoded": '{"args": [' + _nested(DISPLAY_DEPTH - 2) + '], "kwargs": {}}',
        "NaN": '{"args": [NaN, Infinity, -Infinity], "kwargs": {}}',
        "lone surrogate escape": '{"args": ["caf\\udce9"], "kwargs": {"\\ud800": 1}}',
        "NUL escape": '{"args": ["a\\u0000b"], "kwargs": {}}',
        "empty": "",
    }
    if backend == "sqlite":
        payloads["not UTF-8"] = Sql("CAST(X'7B2261726773223A5B22636166E9225D7D' AS TEXT)")
    return payloads


def test_payloads_that_are_no_json_or_no_utf8_show_as_text(web, dash_app, backend):
    jobs = {what: insert_job(dash_app, payload=payload) for what, payload in _bad_payloads(backend).items()}
    entries = {what: insert_failed(dash_app, payload=payload) for what, payload in _bad_payloads(backend).items()}
    for what, job_id in jobs.items():
        detail = _shows_everywhere(web, job_id)
        if what in ("not JSON", "100,000 deep", "990 deep", "not UTF-8"):
            assert isinstance(detail["arguments"], str), what  # the stored text, shown as text
        if what == "deep, still shown decoded":
            assert isinstance(detail["arguments"], dict), what
        if what == "not UTF-8":
            assert detail["arguments"] == '{"args":["caf\ufffd"]}'
            assert "caf\ufffd" in detail["page"]
    for what, entry in entries.items():
        detail = _shows_everywhere(web, entry, "failed")
        assert detail["state"] == "failed", what
    assert "caf\ufffd" in web.get("/api/jobs").content.decode("utf-8") or backend != "sqlite"


def test_payload_with_lone_surrogates_enqueued_through_the_api_shows(web, dash_app):
    body = '{"job": "mail", "args": ["caf\\udce9"]}'
    response = web.post("/api/enqueue", content=body, headers={"Content-Type": "application/json"})
    assert response.status_code == 200, response.text
    [job_id] = response.json()["ids"]
    detail = _shows_everywhere(web, job_id)
    assert detail["arguments"]["args"] == ["caf\ufffd"]
    assert "caf\ufffd" in detail["page"]


def test_numbers_no_json_can_hold_show(web, dash_app, backend):
    if backend not in ("sqlite", "postgres"):
        pytest.skip("MariaDB's DOUBLE holds no infinity or NaN")
    infinite = Sql("1e999") if backend == "sqlite" else Sql("'Infinity'::double precision")
    nan = Sql("NULL") if backend == "sqlite" else Sql("'NaN'::double precision")
    job_id = insert_job(dash_app, progress=infinite, timeout=infinite)
    other = insert_job(dash_app, progress=nan, timeout=nan)
    for each in (job_id, other):
        detail = _shows_everywhere(web, each)
        assert detail["progress"] is None or isinstance(detail["progress"], (int, float, str))


def _invalid_utf8(text: str) -> Sql:
    """``text`` with the byte 0xE9 (no UTF-8 on its own) after it, as SQLite TEXT."""
    return Sql(f"CAST(X'{text.encode().hex()}E9' AS TEXT)")


def test_names_and_errors_that_are_no_utf8_show_with_replacement_characters(web, dash_app, backend):
    if backend != "sqlite":
        pytest.skip("only SQLite keeps bytes that are no UTF-8 in a TEXT column")
    job_id = insert_job(dash_app, name=_invalid_utf8("mail"), last_error=_invalid_utf8("caf"),
                        progress_message=_invalid_utf8("half"), unique_key=_invalid_utf8("key"))
    entry = insert_failed(dash_app, name=_invalid_utf8("mail"), error_type=_invalid_utf8("Error"),
                          error_message=_invalid_utf8("caf"))
    detail = _shows_everywhere(web, job_id)
    assert detail["name"] == "mail\ufffd" and detail["last_error"] == "caf\ufffd"
    assert "mail\ufffd" in detail["page"] and "caf\ufffd" in detail["page"]
    detail = _shows_everywhere(web, entry, "failed")
    assert detail["name"] == "mail\ufffd" and detail["error_message"] == "caf\ufffd"
    dead = web.get("/dead").text
    assert "Error\ufffd" in dead and "caf\ufffd" in dead
    assert web.get("/api/dead").json()["groups"][0]["name"] == "mail\ufffd"
    assert web.get("/jobs?name=mail").status_code == 200


def test_a_queue_name_that_is_no_utf8_shows(web, dash_app, backend):
    if backend != "sqlite":
        pytest.skip("only SQLite keeps bytes that are no UTF-8 in a TEXT column")
    job_id = insert_job(dash_app, queue=_invalid_utf8("mails"))
    entry = insert_failed(dash_app, queue=_invalid_utf8("mails"))
    _shows_everywhere(web, job_id)
    _shows_everywhere(web, entry, "failed")
    assert "mails\ufffd" in web.get("/jobs").text


# ---------------------------------------------------------------------------------- case 6: queue names
BAD_QUEUES = ["nl\n", ".", "..", "a b", "x/y", "q?x=1", "é"]


def _actions(text: str) -> list[str]:
    return re.findall(r'action="([^"]*)"', text)


def test_queue_forms_post_only_to_the_queue_they_name(web, dash_app):
    for name in BAD_QUEUES:
        insert_job(dash_app, queue=name)
    dash_app.registry["mail"].enqueue("a@b.c")
    page = no_server_error(web.get("/queues"))
    assert page.status_code == 200
    actions = [a for a in _actions(page.text) if "/queues/" in a]
    assert "/queues/mails/pause" in actions
    for action in actions:
        # What a browser does with the action: drop newlines and tabs, resolve . and .. segments.
        cleaned = re.sub(r"[\t\n\r]", "", action)
        assert cleaned == action, action
        segments = cleaned.split("?")[0].split("/")
        assert "." not in segments and ".." not in segments and len(segments) == 4, action
        assert re.fullmatch(r"/queues/[A-Za-z0-9._%-]+/(pause|resume|limits)", cleaned), action
    assert web.get("/api/queues").status_code == 200
    assert no_server_error(web.get("/")).status_code == 200


def test_pausing_a_queue_with_a_bad_name_is_refused_with_400(web, dash_app):
    dash_app.registry["mail"].enqueue("a@b.c")
    dash_app.registry["mail"].using(queue="nl").enqueue("a@b.c")
    for quoted in ("nl%0A", "nl%0D%0A", "nl%09", "%2E", ".", "..", "%2E%2E", "a%20b", "x%2Fy", "%C3%A9", "a" * 61):
        for path in (f"/queues/{quoted}/pause", f"/api/queues/{quoted}/pause", f"/queues/{quoted}/resume",
                     f"/api/queues/{quoted}/resume"):
            sent = web.post(path) if path.startswith("/api/") else web.post(path, data={"csrf": token(web)})
            response = no_server_error(sent, path)
            assert response.status_code in (400, 404), (path, response.status_code)
            if quoted not in (".", "..", "%2E", "%2E%2E", "x%2Fy"):  # a client may resolve or split those itself
                assert response.status_code == 400, (path, response.status_code)
                assert "invalid queue name" in response.text, path
        assert dash_app.paused_queues() == [], quoted


def test_a_good_queue_name_still_pauses_and_resumes(web, dash_app):
    done = web.post("/queues/mails.v2_x-1/pause", data={"csrf": token(web)}, follow_redirects=False)
    assert done.status_code == 303
    assert dash_app.paused_queues() == ["mails.v2_x-1"]
    assert web.post("/api/queues/mails.v2_x-1/resume").json() == {"queue": "mails.v2_x-1", "paused": False}
    assert dash_app.paused_queues() == []


def test_a_stored_result_that_is_no_json_shows_and_is_refused_by_result(web, dash_app):
    from errands import BadPayload
    from errands.core.jobs import JobHandle

    @dash_app.job(name="kept", keep_result=True)
    def kept() -> int:
        return 1

    handle = kept.enqueue()
    dash_app.run_until_empty()
    dash_app.store.db.run(lambda cur: cur.execute(dash_app.store.dialect.q("UPDATE {results} SET result = {p} WHERE id = {p}"),  # noqa: E501
                                               ('{"broken": [1,', handle.id)))
    page = web.get(f"/jobs/{handle.id}")
    assert page.status_code == 200, page.text[-1500:]
    assert web.get(f"/api/jobs/{handle.id}").status_code == 200
    with pytest.raises(BadPayload, match="not valid JSON"):
        JobHandle(dash_app, handle.id, "kept").result(timeout=5)
