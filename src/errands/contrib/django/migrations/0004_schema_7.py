"""errands' schema version 7 (each worker records its own lease and heartbeat interval, which its
liveness is judged by) in a database at version 6."""

from django.db import migrations

SCHEMA_VERSION = 7  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0003_schema_6")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
