"""Failure log lines show a job's arguments without the headers an enqueue hook stored beside them."""

from __future__ import annotations

from errands.core.rows import ClaimedJob
from errands.worker.execution import describe_arguments


def _row(payload: str) -> ClaimedJob:
    return ClaimedJob(1, "default", "mail", payload, 0, 1, 3, None, "w:1:x")


def test_stored_headers_are_left_out():
    row = _row('{"args":[1],"kwargs":{},"headers":{"traceparent":"00-abc-def-01"}}')
    assert describe_arguments(row) == '{"args":[1],"kwargs":{}}'


def test_an_argument_named_headers_is_kept():
    row = _row('{"args":[1],"kwargs":{"to":"a","headers":{"X-Id":"1"}}}')
    assert describe_arguments(row) == '{"args":[1],"kwargs":{"to":"a","headers":{"X-Id":"1"}}}'
    both = _row('{"args":[],"kwargs":{"headers":{"X":"1"}},"headers":{"traceparent":"t"}}')
    assert describe_arguments(both) == '{"args":[],"kwargs":{"headers":{"X":"1"}}}'


def test_long_arguments_are_cut():
    assert describe_arguments(_row('{"args":["' + "x" * 300 + '"],"kwargs":{}}'), 50).endswith("…")
