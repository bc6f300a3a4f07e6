"""A small Django project for errands' tests: the database comes from ERRANDS_DJANGO_DB (a URL)."""

import os
from pathlib import Path

import django

from .dburl import database_from_url

try:
    import MySQLdb  # noqa: F401  (mysqlclient, Django's usual MySQL driver)
except ImportError:  # PyMySQL, which errands itself uses, in its place
    import pymysql

    pymysql.install_as_MySQLdb()

BASE_DIR = Path(__file__).resolve().parent.parent
SECRET_KEY = "errands-tests-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "testsite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
LOGIN_URL = "/accounts/login/"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.sessions",
    *([] if django.VERSION >= (6, 0) else ["django_tasks"]),
    "errands.contrib.django",
    "shop",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TEMPLATES = [{"BACKEND": "django.template.backends.django.DjangoTemplates", "DIRS": [BASE_DIR / "templates"],
              "OPTIONS": {"context_processors": ["django.template.context_processors.request"]}}]
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]  # fast, for tests only

DATABASES = {"default": database_from_url(os.environ.get("ERRANDS_DJANGO_DB", f"sqlite:///{BASE_DIR / 'db.sqlite3'}"))}

TASKS = {
    "default": {
        "BACKEND": "errands.contrib.django.ErrandsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"lease": 5},
    },
    "retrying": {
        "BACKEND": "errands.contrib.django.ErrandsBackend",
        "QUEUES": [],
        "OPTIONS": {"max_attempts": 2, "backoff": 0, "table_prefix": "errands_retry_",
                    "task_modules": ["shop.retrying"]},
    },
}
