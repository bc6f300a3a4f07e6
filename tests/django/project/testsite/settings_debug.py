"""The test project with DEBUG on: Django's default LOGGING then prints the ``django`` loggers
(``django.tasks`` among them) on stderr, as in a project fresh from ``startproject``."""

from .settings import *  # noqa: F403

DEBUG = True
