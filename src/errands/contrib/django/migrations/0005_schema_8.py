"""errands' schema version 8 (limits per queue, set from the dashboard) in a database migrated by
an errands that knew only version 7."""

from django.db import migrations


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("errands", "0004_schema_7")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
