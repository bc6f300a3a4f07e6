"""The audit log's two doors (docs/dashboard.md, "The audit log"): the ``Errands`` methods are the
library API and write no line; ``errands.services.operator``'s functions, which the CLI and the
dashboard call, write one each, naming the actor."""

from errands import Errands
from errands.services import operator


def test_the_library_api_writes_no_audit_line_and_the_services_write_one_each(tmp_path):
    app = Errands(f"sqlite:///{tmp_path / 'audit.db'}")

    @app.job(name="boom", max_attempts=1, queue="mails")
    def boom() -> None:
        raise ValueError("no")

    try:
        for _ in range(4):
            boom.enqueue()
        assert app.run_until_empty(["mails"]) == 4
        first, second, third, fourth = sorted(entry.id for entry in app.failed("mails"))
        waiting = boom.enqueue()
        app.pause_queue("mails")
        app.resume_queue("mails")
        assert app.cancel(waiting) == "cancelled"
        assert app.retry_failed(first) == [first]
        assert app.forget_failed(second) == 1
        assert operator.audit_view(app) == []

        operator.set_paused(app, "deploy", "mails", True)
        operator.set_paused(app, "deploy", "mails", False)
        assert operator.cancel_job(app, "deploy", boom.enqueue().id) == "cancelled"
        assert operator.retry_failed(app, "deploy", [third]) == 1
        assert operator.forget_failed(app, "deploy", [fourth]) == 1
        lines = [(e.actor, e.action) for e in reversed(operator.audit_view(app))]
        assert lines == [("deploy", "pause"), ("deploy", "resume"), ("deploy", "cancel"), ("deploy", "retry"),
                         ("deploy", "forget")]
    finally:
        app.close()
