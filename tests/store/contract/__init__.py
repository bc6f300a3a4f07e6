"""The dialect contract: every store verb checked from outside, on every registered backend.

River's ``riverdrivertest`` in errands' terms: one test per verb (or per verb and notable case),
each run by the ``backend`` fixture of ``tests/conftest.py`` on SQLite, PostgreSQL, MariaDB and
MariaDB forced into ``?claim=update``.  A test drives the verbs directly (no worker) and checks
what they return and what the tables then hold.

A contract a backend breaks today is not weakened: the test calls ``support.xfail_on`` for that
backend, which marks it ``xfail(strict=True)`` there with the reason, so the fix turns it red until
the mark goes.  ``grep -rn xfail_on tests/store/contract`` lists them.
"""
