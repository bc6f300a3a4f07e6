from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from .models import Order
from .tasks import mark_order


@csrf_exempt
def place_order(request: HttpRequest) -> HttpResponse:
    """Create an order and enqueue its task in one transaction; ``fail=1`` rolls both back."""
    try:
        with transaction.atomic():
            order = Order.objects.create(total=int(request.POST.get("total", "1")))
            result = mark_order.enqueue(order.pk, "paid")
            if request.POST.get("fail"):
                raise RuntimeError("payment declined")
    except RuntimeError as exc:
        return JsonResponse({"error": str(exc)}, status=402)
    return JsonResponse({"order": order.pk, "task": result.id})
