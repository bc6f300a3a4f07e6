"""errands' schema version 4 (labels, rate-limit costs, unique periods, the error history) in a
database migrated by an errands that knew only version 3 (a fresh database got it from 0001)."""

from django.db import migrations


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    dependencies = [("errands", "0001_initial")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
