"""``manage.py errands_queue``: ``errands queue`` for this project's TASKS backend (see :mod:`._operator`)."""

from ._operator import OperatorCommand


class Command(OperatorCommand):
    cli_name = "queue"
