"""WSGI entry point: Django, with the errands dashboard at /errands/ for staff users.

    gunicorn mysite.wsgi:application
"""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_app = get_wsgi_application()

from errands.contrib.django.dashboard import with_dashboard_wsgi  # noqa: E402

application = with_dashboard_wsgi(django_app, "/errands")
