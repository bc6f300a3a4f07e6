"""The job shape is declared once (errands.core.columns): the row values follow it field for field,
and each guard of a plain job's fast path is made from it, so a new option cannot be dropped."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timezone

from errands.core import columns
from errands.core.columns import CLAIMED, FAILED, FEATURES, JOBS, Fill
from errands.core.jobs import JobOptions
from errands.core.rows import ClaimedJob, FailedJobRow, JobRow, NewJob, UniqueRule
from errands.store.dialects.inserts import FULL, PLAIN, shape_of

NOT_COLUMNS = {"delay", "run_at", "after", "unique_for", "inputs", "step", "unique_rule"}
"""NewJob fields that are not job columns: the due time's parts and what goes to side tables."""


def test_row_values_have_exactly_the_declared_columns():
    assert ClaimedJob._fields == tuple(c.name for c in CLAIMED), "a claim builds ClaimedJob from its column order"
    assert {f.name for f in dataclasses.fields(JobRow)} == {c.name for c in JOBS}
    assert {f.name for f in dataclasses.fields(FailedJobRow)} == {c.name for c in FAILED}


def test_every_column_an_enqueue_fills_from_a_field_is_a_newjob_field():
    filled = {c.name for c in JOBS if c.fill is Fill.FIELD}
    assert filled <= set(NewJob._fields)
    assert set(NewJob._fields) - filled == NOT_COLUMNS


def test_a_newjob_is_plain_exactly_when_every_feature_field_is_at_its_default():
    tail = NewJob._fields[NewJob._fields.index("run_at") + 1:]
    assert {c.name for c in FEATURES} <= set(tail), "every feature column comes after run_at"
    assert NewJob("n", "q", "{}", 5, 9, 1.0, 3.0).is_plain
    examples = {"unique_key": "k", "after": (1,), "concurrency_key": "g", "flags": 1, "batch_id": 1, "label": "l",
                "cost": 2, "unique_for": 1.0, "inputs": 1, "step": (0, "s"), "blocked_by": 1,
                "unique_rule": UniqueRule(replace=True), "expires_at": datetime(2030, 1, 1, tzinfo=timezone.utc),
                "deadline_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "rate_key": "r", "age_after": 1.0,
                "age_base": 0, "age_cap": 1,
                "fairness_key": "tenant", "fair_turn": 1}
    assert set(examples) == set(tail)
    for name, value in examples.items():
        assert not NewJob("n", "q", "{}")._replace(**{name: value}).is_plain, name


def test_a_batchs_insert_writes_the_feature_columns_when_any_job_uses_one():
    plain, rich = NewJob("n", "q", "{}"), NewJob("n", "q", "{}", label="x")
    assert shape_of([plain, plain]) is PLAIN and shape_of([plain, rich]) is FULL
    assert {c.name for c in PLAIN.columns} == {c.name for c in JOBS if c.fill is not None and not c.feature}
    assert {c.name for c in FULL.columns} == {c.name for c in JOBS if c.fill is not None}


def test_every_option_after_run_at_takes_the_enqueue_off_its_fast_path():
    names = [f.name for f in dataclasses.fields(JobOptions)]
    features = names[names.index("run_at") + 1:]
    examples = {"unique_key": "k", "after": (1,), "keep_result": True, "label": "l", "cost": 2, "unique_for": 1.0,
                "on_conflict": "replace", "unique_states": ("waiting",), "debounce": 1.0, "max_wait": 2.0,
                "expires_in": 5.0, "expires_at": datetime(2030, 1, 1, tzinfo=timezone.utc), "deadline": 60.0}
    assert set(features) == set(examples), "a new option needs an example here"
    assert JobOptions(queue="q", priority=3, max_attempts=2, timeout=5.0, delay=1.0).is_plain
    for name, value in examples.items():
        assert not JobOptions(**{name: value}).is_plain, name


def test_claimed_index_names_positions_of_the_claim():
    assert [columns.claimed_index(c.name) for c in CLAIMED] == list(range(len(CLAIMED)))
