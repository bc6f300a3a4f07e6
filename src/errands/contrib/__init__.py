"""Integrations with web frameworks: the dashboard mounted in a host application, with the host's
own authentication, and in-process workers for small deployments.

Each submodule needs its framework and is imported on its own: ``errands.contrib.asgi``
(Starlette, FastAPI), ``errands.contrib.flask`` and ``errands.contrib.django``.
"""
