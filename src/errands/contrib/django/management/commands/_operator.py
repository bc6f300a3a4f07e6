"""``manage.py errands_<command>``: errands' operator commands for a Django project.

``errands status``, ``errands doctor``, ``errands job retry ...`` and the rest are click commands
that find the app from ``--app`` or ``ERRANDS_APP``; a Django project has no such object, its
errands app is made from ``DATABASES`` and ``TASKS``.  Each ``errands_<command>`` runs the very same
click command (options, output, exit codes) on the app of a ``TASKS`` backend (``--backend ALIAS``,
default ``default``), with Django set up and every task module imported, so that ``enqueue`` and
``recover`` know the project's tasks.  ``errands_worker`` and ``errands_migrate`` are commands of
their own; the standalone dashboard (``errands dashboard``, ``errands users``) is left out: in a
Django project the dashboard is mounted behind Django's logins.
"""

from __future__ import annotations

import sys
from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser

from errands.cli import main as cli_main
from errands.cli.context import Context
from errands.core.logs import ensure_errands_output
from errands.diagnostics.commands import MANAGE_PY, commands_as

from ._common import errands_backend

OPERATOR_COMMANDS = ("status", "doctor", "failed", "recover", "enqueue", "queue", "job", "batch", "workflow",
                     "periodic", "metrics")
"""The ``errands`` commands that ``manage.py`` offers as ``errands_<name>``."""
DJANGO_ONLY_OPTIONS = ("--settings", "--pythonpath")
"""manage.py's own options (it has read them already); the rest of the command line is errands'."""


@click.group(cls=type(cli_main))  # errands' group: its errors become the same messages and exit codes
@click.pass_context
def django_cli(ctx: click.Context) -> None:
    """The commands under the names manage.py knows them by (``manage.py errands_status`` in usage lines)."""
    ensure_errands_output()
    ctx.obj = Context(None, None, _app=ctx.obj)  # the backend's app, handed in by OperatorCommand


for _name in OPERATOR_COMMANDS:
    django_cli.add_command(cli_main.commands[_name], name=f"errands_{_name}")


def split_args(argv: list[str]) -> tuple[str, list[str]]:
    """(``--backend``'s alias, errands' arguments) from a command line, without manage.py's own options."""
    alias, rest, skip = "default", [], False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        name, eq, value = arg.partition("=")
        if name in (*DJANGO_ONLY_OPTIONS, "--backend"):
            if not eq:
                value, skip = (argv[i + 1] if i + 1 < len(argv) else ""), True
            if name == "--backend":
                alias = value
            continue
        if arg == "--":
            rest.extend(argv[i:])
            break
        rest.append(arg)
    return alias, rest


class OperatorCommand(BaseCommand):
    """A ``manage.py`` command that runs errands' click command ``cli_name`` (see the module)."""

    cli_name = ""

    @property
    def help(self) -> str:  # type: ignore[override]
        command = cli_main.commands[self.cli_name]
        return (f"errands {self.cli_name} for a TASKS backend (--backend ALIAS, default: default): "
                f"{command.get_short_help_str(200)} Options as in `errands {self.cli_name} --help`.")

    def run_from_argv(self, argv: list[str]) -> None:
        """The command line goes to click untouched (argparse would refuse errands' options)."""
        alias, args = split_args(argv[2:])
        sys.exit(self._run(alias, args, standalone=True))

    def print_help(self, prog_name: str, subcommand: str) -> None:
        self._run("default", ["--help"], standalone=False, app=False)

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("args", nargs="*", help="errands' arguments and options")
        parser.add_argument("--backend", default="default", help="The TASKS alias (default: default).")

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        """For ``call_command``: every argument is errands' (``"--json"``, ``"--queue", "emails"``),
        in its order; only ``--backend`` is the command's own."""
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parse = parser.parse_args

        def parse_errands_args(args: Any = None, namespace: Any = None) -> Any:
            alias, rest = split_args([str(a) for a in args or []])
            parsed = parse([], namespace)
            parsed.args, parsed.backend = rest, alias
            return parsed

        parser.parse_args = parse_errands_args  # type: ignore[method-assign]
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        """``call_command("errands_status", "--json")``: the same, raising CommandError on failure."""
        code = self._run(options["backend"], list(args), standalone=False)
        if code:
            raise CommandError(f"errands {self.cli_name} exited with status {code}", returncode=code)

    def _run(self, alias: str, args: list[str], *, standalone: bool, app: bool = True) -> int:
        errands_app = None
        if app:
            backend = errands_backend(alias)
            backend.discover()
            errands_app = backend.errands
        try:
            # default_map: [tool.errands] of a pyproject.toml configures the errands command, not manage.py.
            with commands_as(MANAGE_PY):  # the doctor's fixes name manage.py commands, not `errands --app`
                code = django_cli.main([f"errands_{self.cli_name}", *args], prog_name="manage.py",
                                       standalone_mode=standalone, default_map={}, obj=errands_app)
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except click.ClickException as exc:
            exc.show()
            return exc.exit_code
        return code if isinstance(code, int) else 0
