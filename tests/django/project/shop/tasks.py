"""Tasks of the test project (errands' worker imports each app's tasks module)."""

try:
    from django.tasks import task
except ImportError:  # Django < 6: the backport
    from django_tasks import task

from .models import Order


@task
def add(a: int, b: int) -> int:
    return a + b


@task
def fail(message: str) -> None:
    raise ValueError(message)


@task
def returns_a_set() -> object:
    return {1, 2}


@task
def mark_order(order_id: int, note: str) -> str:
    order = Order.objects.get(pk=order_id)
    order.note = note
    order.save(update_fields=["note"])
    return f"order {order.pk}: {note}"


@task
async def add_async(a: int, b: int) -> int:
    return a + b


@task(takes_context=True)
def who_am_i(context, label: str) -> dict:
    return {"label": label, "id": context.task_result.id, "attempt": context.attempt,
            "status": str(context.task_result.status)}


@task(queue_name="emails", priority=10)
def send_mail(to: str) -> str:
    return f"sent to {to}"
