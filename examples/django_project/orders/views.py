from django.core.exceptions import ValidationError
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from .models import Order
from .tasks import TaskResultDoesNotExist, send_receipt


@csrf_exempt  # an API endpoint for the example's curl commands; real ones authenticate
@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    """The order and its receipt task commit together: if anything in the block fails, neither exists."""
    try:
        total = int(request.POST["total_cents"])
        email = request.POST["email"]
    except (KeyError, ValueError):
        return JsonResponse({"error": "send email and total_cents (an integer)"}, status=400)
    order = Order(email=email, total_cents=total)
    try:
        order.full_clean()  # the model's own rules (a negative total, a bad address): a 400, not the database's 500
    except ValidationError as exc:
        return JsonResponse({"error": exc.message_dict}, status=400)
    with transaction.atomic():
        order.save()
        result = send_receipt.enqueue(order.pk)
    return JsonResponse({"order": order.pk, "task": result.id}, status=201)


@require_GET
def order_status(request: HttpRequest, order_id: int) -> HttpResponse:
    order = get_object_or_404(Order, pk=order_id)
    task_id = request.GET.get("task")
    body = {"order": order.pk, "receipt": order.receipt}
    if task_id:
        try:
            result = send_receipt.get_result(task_id)
        except TaskResultDoesNotExist:
            return JsonResponse({"error": f"no task {task_id!r}"}, status=404)
        body["task"] = {"status": result.status, "attempts": result.attempts,
                        "return_value": result.return_value if result.status == "SUCCESSFUL" else None,
                        "errors": [e.traceback for e in result.errors]}
    return JsonResponse(body)
