"""A run's log buffer (issue 27, point 4) takes whatever a record holds without raising: a message
whose formatting raises, an object that cannot be shown, huge text, lone surrogates; and the stored
form reads back whatever a row holds.  Pure: no database, no worker."""

from __future__ import annotations

import logging
import sys

import pytest

from errands.core.errors import ConfigurationError
from errands.core.runlogs import RECORD_CAP, LogLine, RunLog, RunLogLimits, decode_lines, encode_lines


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for you")

    def __repr__(self) -> str:
        raise RuntimeError("nor a repr")


def _record(msg: object, *args: object, exc_info: object = None) -> logging.LogRecord:
    return logging.LogRecord("lib", logging.INFO, __file__, 1, msg, args or None, exc_info)  # type: ignore[arg-type]


def test_untrusted_records_are_kept_as_far_as_they_can_be_and_never_raise():
    log = RunLog(1, 1, RunLogLimits())
    log.add(_record("%d items", "many"))
    log.add(_record(_Unprintable()))
    log.add(_record("big %s", "z" * (RECORD_CAP * 3)))
    log.add(_record("half \ud800 surrogate and \x00 nul"))
    try:
        raise KeyError("k")
    except KeyError:
        log.add(_record("caught", exc_info=sys.exc_info()))
    messages = [line.message for line, _ in log.lines]
    assert messages[0] == "'%d items' % ('many',) (the message could not be formatted)"
    assert messages[1].startswith("<_Unprintable>")
    assert len(messages[2]) < RECORD_CAP + 40 and messages[2].endswith("more characters)")
    assert "\ud800" not in messages[3] and "\x00" not in messages[3]
    assert "KeyError: 'k'" in (log.lines[4][0].traceback or "")
    assert decode_lines(log.encoded()) == [line for line, _ in log.lines]


@pytest.mark.parametrize("stored", ["not json", "[1, 2]", '{"a": 1}', "[[1e400, 1, 2, 3]]", None,
                                    "[[0, 1, 2, 3, 4, 5]]"])
def test_whatever_a_row_holds_reads_as_lines(stored):
    lines = decode_lines(stored)
    assert all(isinstance(line, LogLine) and isinstance(line.message, str) for line in lines)


def test_the_round_trip_and_the_limits_checks():
    lines = [LogLine(1.5, "INFO", "a", "x"), LogLine(2.0, "ERROR", "b", "y", "Traceback ...")]
    assert decode_lines(encode_lines(lines)) == lines
    for bad in ({"records": 0}, {"max_bytes": -1}, {"records": True}):
        with pytest.raises(ConfigurationError):
            RunLogLimits(**bad)  # type: ignore[arg-type]
