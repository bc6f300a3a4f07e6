"""errands for Django: a backend for Django's Tasks framework (``django.tasks``, or the
``django-tasks`` backport before Django 6), migrations that create errands' tables in the
project's own database, ``manage.py errands_worker``, and the dashboard behind Django's
staff logins (:mod:`errands.contrib.django.dashboard`).

::

    INSTALLED_APPS = [..., "errands.contrib.django"]
    TASKS = {"default": {"BACKEND": "errands.contrib.django.ErrandsBackend"}}

See docs/integrations/django.md.
"""

from __future__ import annotations

from .backend import ErrandsBackend

__all__ = ["ErrandsBackend"]
