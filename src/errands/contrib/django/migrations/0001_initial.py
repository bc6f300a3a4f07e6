"""errands' tables (every schema version this errands knows) in the database being migrated."""

from django.db import migrations


def create_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection)


class Migration(migrations.Migration):
    initial = True
    dependencies: list[tuple[str, str]] = []
    # Reversing keeps the tables: dropping them would drop every waiting job.
    operations = [migrations.RunPython(create_tables, migrations.RunPython.noop, elidable=False)]
