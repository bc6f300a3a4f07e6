"""Testing code that uses errands, against a real database: the pytest plugin and its helpers.

``pip install errands`` registers the plugin with pytest (``errands.testing.plugin``); its fixtures
are ``errands_app``, ``errands_app_factory``, ``errands_clock`` and ``errands_jobs``
(docs/features/testing.md).  Without pytest, the same pieces::

    with temporary_database(app, tmp_dir) as clock:   # app on a new SQLite file, clock under control
        jobs = Jobs(app)
        signup("ada@example.com")
        jobs.assert_enqueued(send_welcome, kwargs={"email": "ada@example.com"})
        clock.advance(3600)
        jobs.drain()

Unlike an in-memory fake, the jobs go through errands' real SQL on SQLite, so a test sees what a
worker would: unique keys, dependencies, delays, retries and the dead letter behave as in production.
"""

from .clock import DatabaseClock
from .database import temporary_database
from .jobs import Enqueued, Jobs

__all__ = ["DatabaseClock", "Enqueued", "Jobs", "temporary_database"]
