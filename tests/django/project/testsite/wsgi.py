"""WSGI with the errands dashboard at /errands, behind Django's staff logins."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")
django_application = get_wsgi_application()

from errands.contrib.django.dashboard import with_dashboard_wsgi  # noqa: E402

application = with_dashboard_wsgi(django_application, "/errands")
