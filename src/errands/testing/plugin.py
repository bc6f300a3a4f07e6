"""The pytest plugin errands installs (entry point ``pytest11: errands``): fixtures for testing your code.

Fixtures (none is autouse: a test gets them only by asking):

* ``errands_app``: your app (``errands_app = module:attr`` in the pytest ini, or ``--errands-app``)
  on a new SQLite database of the test's own, whose clock the test controls; it points back where
  it did afterwards.  Override it to bind another app: ``return errands_app_factory(my_app)``.
* ``errands_app_factory``: binds any ``Errands`` object (or ``"module:attr"``) the same way.
* ``errands_clock``: the database clock of ``errands_app`` (:class:`~errands.testing.DatabaseClock`).
* ``errands_jobs``: :class:`~errands.testing.Jobs` of ``errands_app``: drain, enqueued, assert_enqueued,
  assert_not_enqueued, run_schedules.

pytest loads this module in every run of an environment that has errands, errands' own test suite
included: it adds one option, one ini key and four fixtures, and does nothing until a fixture is used.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from ..app import Errands
from .clock import DatabaseClock
from .database import temporary_database
from .jobs import Jobs

INI = "errands_app"
OPTION = "--errands-app"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(INI, "module:attr of the Errands app the errands_app fixture puts on a temporary database")
    parser.getgroup("errands").addoption(
        OPTION, dest="errands_app", metavar="MODULE:ATTR", default=None,
        help=f"the Errands app for the errands_app fixture (overrides the {INI} ini key)")


class AppFactory:
    """What ``errands_app_factory`` is: ``factory(app)`` puts ``app`` on a temporary database until the
    test ends and returns it; ``factory.clock(app)`` is that database's clock."""

    def __init__(self, config: pytest.Config, directory: Path, stack: ExitStack) -> None:
        self._config = config
        self._directory = directory
        self._stack = stack
        self._clocks: dict[int, DatabaseClock] = {}

    def __call__(self, app: Errands | str | None = None) -> Errands:
        """Bind ``app`` (an ``Errands`` object, ``"module:attr"``, or None: the configured one)."""
        target = _load(app if app is not None else _configured(self._config))
        if id(target) not in self._clocks:
            self._clocks[id(target)] = self._stack.enter_context(temporary_database(target, self._directory))
        return target

    def clock(self, app: Errands) -> DatabaseClock:
        try:
            return self._clocks[id(app)]
        except KeyError:
            raise LookupError(f"{app!r} was not put on a temporary database by this factory") from None


@pytest.fixture
def errands_app_factory(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[AppFactory]:
    with ExitStack() as stack:
        yield AppFactory(request.config, tmp_path / "errands", stack)


@pytest.fixture
def errands_app(errands_app_factory: AppFactory) -> Errands:
    return errands_app_factory()


@pytest.fixture
def errands_clock(errands_app_factory: AppFactory, errands_app: Errands) -> DatabaseClock:
    return errands_app_factory.clock(errands_app)


@pytest.fixture
def errands_jobs(errands_app: Errands) -> Jobs:
    return Jobs(errands_app)


def _configured(config: pytest.Config) -> str:
    spec = config.getoption("errands_app") or config.getini(INI)
    if not spec:
        pytest.fail(f"the errands_app fixture needs your app: set `{INI} = yourproject.tasks:app` in the pytest "
                    f"ini ([tool.pytest.ini_options] in pyproject.toml), pass {OPTION} yourproject.tasks:app, or "
                    "override the fixture: return errands_app_factory(app)", pytrace=False)
    return str(spec)


def _load(app: Errands | str) -> Errands:
    if isinstance(app, Errands):
        return app
    module_name, _, attr = str(app).partition(":")
    try:
        found: object = importlib.import_module(module_name)
    except ImportError as exc:
        pytest.fail(f"errands_app {app!r}: cannot import {module_name!r}: {exc}", pytrace=False)
    for part in (attr or "app").split("."):
        found = getattr(found, part, None)
    if not isinstance(found, Errands):
        pytest.fail(f"errands_app {app!r}: {module_name}.{attr or 'app'} is {found!r}, not an Errands app",
                    pytrace=False)
    return found
