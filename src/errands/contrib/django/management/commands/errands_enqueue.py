"""``manage.py errands_enqueue``: ``errands enqueue`` for this project's TASKS backend (see :mod:`._operator`)."""

from ._operator import OperatorCommand


class Command(OperatorCommand):
    cli_name = "enqueue"
