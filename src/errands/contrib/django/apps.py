"""The Django app: add ``"errands.contrib.django"`` to INSTALLED_APPS for the migration that
creates errands' tables and the ``errands_worker`` / ``errands_migrate`` commands."""

from __future__ import annotations

from django.apps import AppConfig


class ErrandsConfig(AppConfig):
    name = "errands.contrib.django"
    label = "errands"
    verbose_name = "errands"
    default_auto_field = "django.db.models.BigAutoField"
