"""errands' schema version 12 (what a job costs the database, issue 29: on PostgreSQL, room on each
page of the jobs table for the claim's new row versions) in a database at version 11."""

from django.db import migrations

SCHEMA_VERSION = 12  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0008_schema_11")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
