"""errands' schema version 10 (when a job expires unstarted, its deadline across retries, its
rate-limit key: three nullable job columns; when each rate-limit start leaves its window, with its
index; priority aging: the job's ``age_after``, ``age_base`` and ``age_cap`` with the aging index;
fairness between keys: the job's ``fairness_key`` and ``fair_turn``, the claim index rebuilt with the
turn after the priority, and the ``fair_keys`` counters table) in a database at version 9."""

from django.db import migrations

SCHEMA_VERSION = 10  # errands' schema version this migration brings the database to


def upgrade_tables(apps, schema_editor):  # type: ignore[no-untyped-def]
    from errands.contrib.django.schema import migrate_connection

    migrate_connection(schema_editor.connection, to=SCHEMA_VERSION)


class Migration(migrations.Migration):
    dependencies = [("errands", "0006_schema_9")]
    operations = [migrations.RunPython(upgrade_tables, migrations.RunPython.noop, elidable=False)]
