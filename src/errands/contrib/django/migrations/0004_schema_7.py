"""errands' schema version 7 (each worker records its own lease and heartbeat interval, which its
liveness is judged by) in a database migrated by an errands that knew only version 6."""

from django.db import migrations


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("errands", "0003_schema_6")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
