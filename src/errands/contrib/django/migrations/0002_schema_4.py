"""errands' schema version 4 (labels, rate-limit costs, unique periods, the error history) in a
database at version 3 (from 0001, or from an errands that knew only version 3)."""

from django.db import migrations

SCHEMA_VERSION = 4  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0001_initial")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
