"""errands' tables up to schema version 3 (the jobs, the dead letter, the workers, the features' tables,
the dashboard's) in the database being migrated; the migrations after this one bring the later versions."""

from django.db import migrations

SCHEMA_VERSION = 3  # errands' schema version this migration brings the database to


def create_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    # Reversing keeps the tables: dropping them would drop every waiting job.
    operations = [migrations.RunPython(create_tables, migrations.RunPython.noop, elidable=False)]
