"""``manage.py errands_migrate``: create or upgrade errands' tables without Django's migrate.

``manage.py migrate`` already does this (the app's migration); this command is for a
database that Django's migrations do not manage, and ``--sql`` prints the DDL for a DBA.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import connections

from errands.core.errors import ErrandsError

from ...schema import ddl_store
from ._common import errands_backend


class Command(BaseCommand):
    help = "Create or upgrade errands' tables for a TASKS backend (safe to run again)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--backend", default="default", help="The TASKS alias (default: default).")
        parser.add_argument("--sql", action="store_true", help="Print the DDL instead of running it.")

    def handle(self, *args: Any, **options: Any) -> None:
        backend = errands_backend(options["backend"])
        if options["sql"]:
            vendor = connections[backend.config.database].vendor
            self.stdout.write(ddl_store(vendor, backend.config.table_prefix).migration_sql())
            return
        app = backend.errands
        try:
            applied = app.migrate()
        except ErrandsError as exc:
            raise CommandError(str(exc)) from exc
        if options["verbosity"] > 0:
            self.stdout.write(f"errands schema: applied versions {', '.join(map(str, applied))}" if applied
                              else "errands schema: already up to date")
