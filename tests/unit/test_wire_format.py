"""docs/wire-format.md is a contract with outside writers: its version, its parameters table, its
payload example and its columns table are held here to errands.core.wire, errands.core.payload and
errands.core.columns (the entry point itself is tested on every database in
tests/features/test_sql_enqueue.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from errands.core import wire
from errands.core.columns import BY_NAME, JOBS
from errands.core.payload import decode_arguments, encode_payload

PAGE = (Path(__file__).resolve().parents[2] / "docs" / "wire-format.md").read_text()


def _table(marker: str) -> list[list[str]]:
    """The rows of the Markdown table between ``<!-- wire-format {marker}`` and its end comment."""
    block = PAGE.split(f"<!-- wire-format {marker}", 1)[1].split("<!-- end of wire-format", 1)[0]
    lines = [line for line in block.splitlines() if line.startswith("|")][2:]  # past the header and rule
    return [[cell.strip().strip("`") for cell in line.strip("|").split("|")] for line in lines]


def test_the_page_states_the_codes_version():
    assert f"Wire format version **{wire.WIRE_VERSION}**." in PAGE
    assert f"This page is version {wire.WIRE_VERSION}" in PAGE


def test_the_parameters_table_is_the_entry_points():
    rows = _table("parameters")
    assert [(name, default, meaning) for name, default, meaning in rows] == \
        [(p.name, p.default, p.meaning) for p in wire.PARAMETERS]
    assert set(wire.REFUSALS) == {p.name for p in wire.PARAMETERS}


def test_the_payload_example_decodes_as_the_python_enqueue_writes_it():
    [example] = re.findall(r"```json\n(.*?)\n```", PAGE, re.S)
    args, kwargs = decode_arguments(example)
    assert (args, kwargs) == ([42, 19.5], {"currency": "USD"})
    assert json.loads(encode_payload("send_receipt", args, kwargs, 10_000)) == json.loads(example)


def test_the_columns_table_names_every_column_an_outside_insert_must_consider():
    """Every NOT NULL job column but the id is on the page, either to write or with the default it has;
    every column on the page is a job column."""
    rows = {column: rule for column, rule in _table("columns")}
    assert set(rows) <= set(BY_NAME)
    not_null = {c.name for c in JOBS if not c.nullable} - {"id"}
    assert not_null <= set(rows), f"NOT NULL job columns the page does not mention: {not_null - set(rows)}"
    required = {c for c, rule in rows.items() if not rule.startswith(("default", "leave it"))}
    assert required == {"queue", "name", "payload", "max_attempts", "available_at", "created_at"}
    assert required <= not_null
