"""The project's tasks.  errands' worker imports every installed app's ``tasks`` module."""

try:  # Django 6
    from django.tasks import task
    from django.tasks.exceptions import TaskResultDoesNotExist
except ImportError:  # Django 4.2-5.2: the django-tasks backport
    from django_tasks import task
    from django_tasks.exceptions import TaskResultDoesNotExist

__all__ = ["TaskResultDoesNotExist", "send_receipt"]

from .models import Order


@task(queue_name="emails")
def send_receipt(order_id: int) -> str:
    order = Order.objects.get(pk=order_id)
    order.receipt = f"Receipt for order {order.pk}: {order.total_cents / 100:.2f} EUR, sent to {order.email}"
    order.save(update_fields=["receipt"])
    return order.receipt
