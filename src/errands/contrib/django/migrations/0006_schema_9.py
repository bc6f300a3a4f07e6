"""errands' schema version 9 (the alerts table: whether each alert threshold is crossed; on MySQL the
due time at the end of the claim index) in a database migrated by an errands that knew only version 8."""

from django.db import migrations


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("errands", "0005_schema_8")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
