"""``manage.py errands_periodic``: ``errands periodic`` for this project's TASKS backend (see :mod:`._operator`)."""

from ._operator import OperatorCommand


class Command(OperatorCommand):
    cli_name = "periodic"
