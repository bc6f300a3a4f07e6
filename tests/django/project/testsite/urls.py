from django.contrib.auth.views import LoginView
from django.urls import path
from shop import views

urlpatterns = [
    path("accounts/login/", LoginView.as_view(template_name="login.html")),
    path("orders/", views.place_order),
]
