"""Django's Tasks framework from wherever this Django has it: ``django.tasks`` (Django 6.0+)
or the ``django-tasks`` backport (package ``django_tasks``), which is the same API under another
name.  Every other module of the integration imports these names from here, never from either
package directly.
"""

from __future__ import annotations

try:  # Django >= 6.0
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import DEFAULT_TASK_QUEUE_NAME, TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:
    try:  # Django 4.2 - 5.2 with the backport
        from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import DEFAULT_TASK_QUEUE_NAME, Task, TaskError
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started
        from django_tasks.utils import normalize_json
    except ImportError as exc:
        from django.core.exceptions import ImproperlyConfigured

        raise ImproperlyConfigured(
            "errands.contrib.django needs Django's Tasks framework: Django 6.0 or newer, or the django-tasks "
            "backport on older Django (pip install django-tasks; errands[django] brings it only on Python "
            "< 3.12)") from exc

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]
