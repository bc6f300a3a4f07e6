"""How a fix names errands' commands: the way the person reading it runs them.

The same checks run as ``errands doctor`` and as a Django project's ``manage.py errands_doctor``;
a Django user told to run ``errands --app <module:app> worker`` has no such module to give (the
project's errands app is made from ``DATABASES`` and ``TASKS``), so the manage.py commands set
their own form around the run.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

CLI = "errands {verb}"
MANAGE_PY = "python manage.py errands_{verb}"

_form: ContextVar[str] = ContextVar("errands_command_form", default=CLI)


def command(verb: str, rest: str = "", *, app: bool = False) -> str:
    """``errands migrate``, or ``python manage.py errands_migrate`` under :func:`commands_as`.

    ``app``: the command needs the app (its registered jobs), not only the database; the command
    line form then names ``--app``, which manage.py does not need."""
    form = _form.get()
    if app and form == CLI:
        verb = f"--app <module:app> {verb}"
    line = form.format(verb=verb)
    return f"{line} {rest}" if rest else line


def same_options() -> str:
    """What else the reader must pass so that the command reaches the same database."""
    return "with the same --app / --database-url as this command" if _form.get() == CLI \
        else "with the same --backend as this command"


@contextmanager
def commands_as(form: str) -> Iterator[None]:
    """Name commands in ``form`` (:data:`MANAGE_PY`, say) while the block runs."""
    token = _form.set(form)
    try:
        yield
    finally:
        _form.reset(token)
