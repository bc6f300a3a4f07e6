"""A task on the "retrying" backend (two attempts), found through OPTIONS['task_modules']."""

try:
    from django.tasks import task
except ImportError:  # Django < 6: the backport
    from django_tasks import task

from errands import current_job


@task(backend="retrying")
def flaky(fail_times: int) -> int:
    attempt = current_job().attempt
    if attempt <= fail_times:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt
