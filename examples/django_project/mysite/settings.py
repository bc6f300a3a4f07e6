"""Settings of the example project: Django's Tasks on errands, in the project's own database.

The database is SQLite (db.sqlite3 here) unless EXAMPLE_DATABASE_URL names another one:
postgresql://user:password@host/name (libpq parameters such as ?sslmode=require as the query) or
mysql://user:password@host/name.
"""

import os
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

import django

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = os.environ.get("EXAMPLE_SECRET_KEY", "dev only: set EXAMPLE_SECRET_KEY in production")
DEBUG = os.environ.get("EXAMPLE_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "static/"
LOGIN_URL = "/admin/login/"  # the dashboard at /errands/ sends strangers here

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),  # Django < 6: the django-tasks backport
    "errands.contrib.django",  # the migration that creates errands' tables; manage.py errands_worker
    "orders",
]
MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]
TEMPLATES = [{
    "BACKEND": "django.template.backends.django.DjangoTemplates",
    "APP_DIRS": True,
    "OPTIONS": {"context_processors": ["django.template.context_processors.request",
                                       "django.contrib.auth.context_processors.auth",
                                       "django.contrib.messages.context_processors.messages"]},
}]

TASKS = {
    "default": {
        "BACKEND": "errands.contrib.django.ErrandsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"max_attempts": 3},  # a failing task gets two more tries, with exponential backoff
    },
}


def database(url: str) -> dict:
    """A DATABASES entry from a URL (a stand-in for dj-database-url, to need nothing else)."""
    parts = urlsplit(url)
    if parts.scheme == "sqlite":
        # WAL and IMMEDIATE transactions: web requests and workers write the same file.
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": parts.path[1:] or BASE_DIR / "db.sqlite3",
                "OPTIONS": {"transaction_mode": "IMMEDIATE", "init_command": "PRAGMA journal_mode=WAL;"}}
    engine = {"postgresql": "postgresql", "mysql": "mysql"}[parts.scheme]
    if engine == "mysql":
        try:
            import MySQLdb  # noqa: F401  (mysqlclient)
        except ImportError:  # PyMySQL, which errands[mysql] brings, stands in for it
            import pymysql

            pymysql.install_as_MySQLdb()
    return {"ENGINE": f"django.db.backends.{engine}", "NAME": unquote(parts.path.lstrip("/")),
            "USER": unquote(parts.username or ""), "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "", "PORT": str(parts.port or ""), "OPTIONS": dict(parse_qsl(parts.query))}


DATABASES = {"default": database(os.environ.get("EXAMPLE_DATABASE_URL", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"))}
