"""ASGI with the errands dashboard at /errands, behind Django's staff logins."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testsite.settings")
django_application = get_asgi_application()

from errands.contrib.django.dashboard import with_dashboard  # noqa: E402

application = with_dashboard(django_application, "/errands")
