"""The app's and a job's options are declared once (``AppOptions``, ``JobSpec``); what mirrors them
(the TypedDicts ``Errands(**options)`` and ``@app.job(**options)`` are typed with, the settings
sources' fields, ``DEFAULTS``, the configuration page's table) must not drift from them."""

import dataclasses
import math
import re
import textwrap
from pathlib import Path
from typing import get_type_hints

import pytest

from errands import ConfigurationError, Errands, InvalidOption
from errands.core import settings
from errands.core.jobs import JobSpec, JobSpecArgs
from errands.core.settings import DEFAULTS, AppOptionArgs, AppOptions

DOCS = Path(__file__).resolve().parents[2] / "docs"


def _declared(typed_dict: type) -> dict[str, str]:
    """A TypedDict's keys with their annotations as written (TypedDict keeps them as ForwardRefs)."""
    return {name: getattr(hint, "__forward_arg__", hint) for name, hint in typed_dict.__annotations__.items()}


@pytest.mark.parametrize(("options", "keywords"), [(AppOptions, AppOptionArgs), (JobSpec, JobSpecArgs)],
                         ids=["app", "job"])
def test_the_keyword_types_mirror_the_options_name_for_name_and_type_for_type(options, keywords):
    fields = {f.name: f.type for f in dataclasses.fields(options)}
    assert list(_declared(keywords)) == list(fields)
    assert _declared(keywords) == fields
    assert keywords.__total__ is False  # every option may be left out: its default applies
    get_type_hints(options)  # every annotation names something real (the mirror's are compared as text)


def test_every_option_is_a_keyword_of_its_door_with_its_declared_default():
    app = Errands("sqlite:///:memory:", **{f.name: f.default for f in dataclasses.fields(AppOptions)})
    plain = Errands("sqlite:///:memory:")
    assert app.job_defaults == plain.job_defaults and app.alert_thresholds == plain.alert_thresholds
    assert (app.lease, app.result_ttl, app.failed_ttl, app.payload_limit) == (30.0, 86400.0, 30 * 86400.0, 65536)

    def f(x):
        return x

    declared = app.job(**{**{f.name: f.default for f in dataclasses.fields(JobSpec)}, "name": "declared"})(f)
    assert declared.options == app.job(name="f")(f).options and declared.behaviour == app.job(name="other")(f).behaviour


def test_defaults_and_the_settings_fields_are_read_from_the_app_options():
    assert dict(DEFAULTS) == {f.name: f.default for f in dataclasses.fields(AppOptions)}
    assert set(settings._FIELDS) == set(DEFAULTS) - {"eager", "keep_traceback"}  # those two only code passes
    with pytest.raises(TypeError):
        DEFAULTS["lease"] = 1  # type: ignore[index]
    assert settings._FIELDS["failed_ttl"][1] and not settings._FIELDS["lease"][1]  # None allowed, or not
    assert settings._FIELDS["backoff"][1] is False


def test_the_configuration_page_lists_every_setting():
    page = (DOCS / "configuration.md").read_text()
    listed = re.findall(r"^\| `([a-z_]+)` \| `ERRANDS_", page, flags=re.MULTILINE)
    assert sorted(listed) == sorted(settings._FIELDS)


def test_the_options_check_their_values_as_the_doors_always_did():
    with pytest.raises(ConfigurationError, match="lease must be at least one second"):
        AppOptions(lease=0.5)
    with pytest.raises(ConfigurationError, match="app-wide job default: max_attempts"):
        Errands("sqlite:///:memory:", max_attempts=0)
    with pytest.raises(TypeError, match="leese"):
        Errands("sqlite:///:memory:", leese=3)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match="concurrency_limit must be a positive integer"):
        JobSpec(concurrency_limit=0)
    with pytest.raises(ConfigurationError, match="could never start"):
        JobSpec(rate_limit="5/minute", cost=6)
    app = Errands("sqlite:///:memory:")
    with pytest.raises(InvalidOption, match="priority must be a 32-bit integer"):
        app.job(priority=2**40)
    assert JobSpec(rate_limit="10/minute").rate_limit == JobSpec(rate_limit="10/min").rate_limit  # parsed once
    assert app.job(timeout=math.inf, name="unlimited")(lambda: None).options.timeout is None


def test_mypy_checks_the_options_and_the_enqueue_calls_of_a_users_code(tmp_path):
    api = pytest.importorskip("mypy.api")
    code = tmp_path / "user_code.py"
    code.write_text(textwrap.dedent('''\
        import math
        from errands import Errands

        app = Errands("sqlite:///x.db", lease=60, keep_results=True, failed_ttl=None, backoff=[1, 5], eager=True)
        bad_name = Errands("sqlite:///x.db", leese=60)
        bad_type = Errands("sqlite:///x.db", lease="soon")

        @app.job(queue="mails", max_attempts=5, retry_on=ValueError, rate_limit="10/minute", timeout=math.inf)
        def send(to: str, *, urgent: bool = False) -> None: ...

        @app.job
        def plain(a: int) -> int:
            return a

        send.enqueue("a@b.c", urgent=True)
        send.using(queue="urgent").enqueue("a@b.c")
        total: int = plain(3) + plain.enqueue(1).id
        send.enqueue(1)
        send.enqueue("a", cc="b")
        app.job(max_attempt=3)
        app.job(queue=3)
        '''))
    out, err, status = api.run([str(code), "--no-error-summary", "--hide-error-context", "--no-pretty",
                                "--cache-dir", str(tmp_path / "cache"), "--follow-imports", "silent"])
    errors = sorted((int(m[0]), m[1]) for m in re.findall(r"user_code\.py:(\d+): error: .*\[([a-z-]+)\]$", out,
                                                          flags=re.MULTILINE))
    assert errors == [(5, "call-arg"), (6, "arg-type"), (18, "arg-type"), (19, "call-arg"), (20, "call-overload"),
                      (21, "call-overload")], out + err
