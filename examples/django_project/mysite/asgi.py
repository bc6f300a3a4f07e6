"""ASGI entry point: Django, with the errands dashboard at /errands/ for staff users.

    uvicorn mysite.asgi:application
"""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
django_app = get_asgi_application()  # sets Django up: import what needs settings after it

from errands.contrib.django.dashboard import with_dashboard  # noqa: E402

application = with_dashboard(django_app, "/errands")
