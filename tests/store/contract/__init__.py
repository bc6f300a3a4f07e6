"""The dialect contract: every store verb checked from outside, on every registered backend.

River's ``riverdrivertest`` in errands' terms: one test per verb (or per verb and notable case),
each run by the ``backend`` fixture of ``tests/conftest.py`` on SQLite, PostgreSQL, MariaDB and
MariaDB forced into ``?claim=update``.  A test drives the verbs directly (no worker) and checks
what they return and what the tables then hold.
"""
