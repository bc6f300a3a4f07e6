"""Integrations with web frameworks: the dashboard mounted in a host application, with the host's
own authentication, and in-process workers for small deployments.

Each submodule needs its framework or library and is imported on its own: ``errands.contrib.asgi``
(Starlette, FastAPI), ``errands.contrib.flask``, ``errands.contrib.django``,
``errands.contrib.opentelemetry`` and ``errands.contrib.prometheus``; ``errands.contrib.inprocess``
(a worker on a thread of any process) needs nothing.
"""
