"""errands' schema version 11 (operating a running fleet, issue 27: schedules stored in the database,
worker commands, checkpoints of long jobs, per-run logs, enqueue from SQL) in a database at version 10."""

from django.db import migrations

SCHEMA_VERSION = 11  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0007_schema_10")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
