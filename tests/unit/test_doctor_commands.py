"""The doctor's fixes name commands the way the reader runs them (errands CLI or manage.py)."""

from errands.diagnostics.commands import MANAGE_PY, command, commands_as, same_options


def test_the_command_line_form_names_the_app_where_the_command_needs_it() -> None:
    assert command("migrate") == "errands migrate"
    assert command("migrate", "--sql") == "errands migrate --sql"
    assert command("worker", "-q mails", app=True) == "errands --app <module:app> worker -q mails"
    assert "--database-url" in same_options()


def test_a_django_project_reads_manage_py_commands_and_the_form_is_restored() -> None:
    with commands_as(MANAGE_PY):
        assert command("worker", "-q mails", app=True) == "python manage.py errands_worker -q mails"
        assert command("migrate") == "python manage.py errands_migrate"
        assert "--backend" in same_options()
    assert command("doctor") == "errands doctor"
