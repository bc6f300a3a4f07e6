"""errands' schema version 9 (the alerts table: whether each alert threshold is crossed; on MySQL the
due time at the end of the claim index) in a database at version 8."""

from django.db import migrations

SCHEMA_VERSION = 9  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0005_schema_8")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
