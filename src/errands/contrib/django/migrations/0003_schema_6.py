"""errands' schema versions 5 (workflows: dependency counts, the steps table) and 6 (snooze
counts) in a database migrated by an errands that knew only version 4."""

from django.db import migrations


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("errands", "0002_schema_4")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
