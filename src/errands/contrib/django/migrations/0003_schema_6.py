"""errands' schema versions 5 (workflows: dependency counts, the steps table) and 6 (snooze
counts) in a database at version 4."""

from django.db import migrations

SCHEMA_VERSION = 6  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0002_schema_4")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
