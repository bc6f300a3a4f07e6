"""``manage.py errands_workflow``: ``errands workflow`` for this project's TASKS backend (see :mod:`._operator`)."""

from ._operator import OperatorCommand


class Command(OperatorCommand):
    cli_name = "workflow"
