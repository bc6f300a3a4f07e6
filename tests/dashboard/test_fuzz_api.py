"""Fuzz the JSON API from its own OpenAPI description (schemathesis): no request makes it fail with a 500."""

from __future__ import annotations

import os

import pytest

schemathesis = pytest.importorskip("schemathesis")
from conftest import csrf, login  # noqa: E402
from helpers import drain  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("backend", ["sqlite", "postgres"], indirect=True)
def test_no_request_described_by_the_openapi_document_causes_a_server_error(web, dash_app):
    dash_app.registry["boom"].enqueue(1)
    dash_app.registry["mail"].enqueue("a@b.c")
    drain(dash_app)
    login(web)
    token = csrf(web)
    schema = schemathesis.openapi.from_dict(web.get("/api/openapi.json").json())
    operations = [op.ok() for op in schema.get_all_operations()]
    assert len(operations) >= 17
    seen: list[tuple[str, int]] = []

    examples = len(operations) * int(os.environ.get("FUZZ_EXAMPLES", "25"))

    @settings(max_examples=examples, deadline=None, database=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                     HealthCheck.filter_too_much])
    @given(data=st.data())
    def fuzz(data: st.DataObject) -> None:
        op = data.draw(st.sampled_from(operations))
        case = data.draw(op.as_strategy())
        headers = {k: str(v) for k, v in (case.headers or {}).items() if k.lower() != "x-csrf-token"}
        headers["X-CSRF-Token"] = token
        kwargs = {"params": case.query or None, "headers": headers}
        if case.body is not None and type(case.body).__name__ != "NotSet" and op.method.upper() == "POST":
            kwargs["json"] = case.body
        response = web.request(op.method.upper(), case.formatted_path, **kwargs)
        seen.append((f"{op.method.upper()} {op.path}", response.status_code))
        assert response.status_code < 500, (op.method, case.formatted_path, kwargs, response.text[:500])
        assert "Traceback" not in response.text

    fuzz()
    assert len({label for label, _ in seen}) >= len(operations) // 2  # most operations were exercised
