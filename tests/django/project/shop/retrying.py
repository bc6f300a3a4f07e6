"""Tasks on the "retrying" backend (two attempts), found through OPTIONS['task_modules']."""

import asyncio

try:
    from django.tasks import task
except ImportError:  # Django < 6: the backport
    from django_tasks import task

from errands import JobCancelled, current_job


@task(backend="retrying")
def flaky(fail_times: int) -> int:
    attempt = current_job().attempt
    if attempt <= fail_times:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


@task(backend="retrying")
def withdrawn() -> None:
    """Gives up for good although an attempt is left: errands never retries a cancellation."""
    raise JobCancelled("the order was withdrawn")



@task(backend="retrying")
async def waits() -> None:
    """Waits for its cancellation (a test asks for it); a worker that failed to cancel it fails the test."""
    await asyncio.sleep(60)
