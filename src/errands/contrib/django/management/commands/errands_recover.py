"""``manage.py errands_recover``: ``errands recover`` for this project's TASKS backend (see :mod:`._operator`)."""

from ._operator import OperatorCommand


class Command(OperatorCommand):
    cli_name = "recover"
