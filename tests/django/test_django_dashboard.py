"""The dashboard mounted in the project (ASGI and WSGI), behind Django's own staff logins."""

from __future__ import annotations

import re
from typing import Any

import pytest
from http_client import Browser

from errands.contrib.django.compat import task_backends

PASSWORD = "correct horse battery"


def make_user(name: str, *, staff: bool = True, superuser: bool = False) -> Any:
    from django.contrib.auth.models import User

    return User.objects.create_user(name, password=PASSWORD, is_staff=staff, is_superuser=superuser)


@pytest.fixture
def site(tasks_backend: Any) -> Browser:
    """The project's ASGI application (testsite/asgi.py: Django plus the dashboard at /errands)."""
    from django.core.asgi import get_asgi_application

    from errands.contrib.django.dashboard import with_dashboard

    return Browser(asgi=with_dashboard(get_asgi_application(), "/errands"))


def sign_in(browser: Browser, name: str) -> None:
    """Through Django's own LoginView, as a person would (its CSRF cookie and form token)."""
    page = browser.get("/accounts/login/?next=/errands/")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text)
    assert page.status == 200 and token, page.text
    reply = browser.post("/accounts/login/", {"username": name, "password": PASSWORD, "next": "/errands/",
                                              "csrfmiddlewaretoken": token.group(1)})
    assert reply.status == 302 and reply.location == "/errands/", (reply.status, reply.text[:500])


def csrf_of(browser: Browser) -> str:
    """The dashboard's double-submit token, as its pages embed it in their forms."""
    page = browser.get("/errands/queues")
    assert page.status == 200, page.text[:300]
    return browser.cookies["errands_csrf"]


def test_strangers_go_to_djangos_login_and_api_says_401(site: Browser) -> None:
    page = site.get("/errands/jobs?queue=default")
    assert page.status == 303
    assert page.location == "/accounts/login/?next=/errands/jobs%3Fqueue%3Ddefault"
    api = site.get("/errands/api/overview")
    assert api.status == 401 and b"authentication required" in api.body
    assert site.get("/errands/healthz").status == 200  # public, shows no job data
    assert site.get("/elsewhere/").status == 404  # Django's own 404: the rest of the site is Django's


def test_staff_reads_but_cannot_act(site: Browser) -> None:
    make_user("vic")
    sign_in(site, "vic")
    overview = site.get("/errands/")
    assert overview.status == 200 and b"vic" in overview.body
    assert site.get("/errands/api/me").text.count('"viewer"') == 1
    token = csrf_of(site)
    refused = site.post("/errands/queues/default/pause", {"csrf": token})
    assert refused.status == 403
    assert task_backends["default"].errands.paused_queues() == []


def test_superuser_acts_with_csrf(site: Browser) -> None:
    make_user("ada", superuser=True)
    sign_in(site, "ada")
    token = csrf_of(site)
    assert site.post("/errands/queues/default/pause", {"csrf": "forged"}).status == 403
    assert task_backends["default"].errands.paused_queues() == []
    done = site.post("/errands/queues/default/pause", {"csrf": token})
    assert done.status == 303 and done.location.startswith("/errands/queues")
    assert task_backends["default"].errands.paused_queues() == ["default"]
    assert site.get("/errands/api/me").text.count('"admin"') == 1


def test_non_staff_and_stale_sessions_are_strangers(site: Browser) -> None:
    user = make_user("bob", staff=False)
    sign_in(site, "bob")
    assert site.get("/errands/").status == 303
    user.is_staff = True
    user.save()
    assert site.get("/errands/").status == 200
    user.set_password("a new password")  # Django ends sessions made with the old one (session hash)
    user.save()
    reply = site.get("/errands/")
    assert reply.status == 303 and reply.location.startswith("/accounts/login/")


def test_forged_cookies_and_headers_do_not_count(site: Browser) -> None:
    make_user("ada", superuser=True)
    site.cookies["sessionid"] = "not-a-session"
    assert site.get("/errands/", x_remote_user="ada", errands_principal="ada").status == 303


def test_admin_permission_makes_staff_admins(tasks_backend: Any) -> None:
    from django.contrib.auth.models import Permission
    from django.core.asgi import get_asgi_application

    from errands.contrib.django.dashboard import with_dashboard

    site = Browser(asgi=with_dashboard(get_asgi_application(), "/errands", admin_permission="shop.change_order"))
    user = make_user("op")
    user.user_permissions.add(Permission.objects.get(codename="change_order"))
    sign_in(site, "op")
    assert site.get("/errands/api/me").text.count('"admin"') == 1


def test_wsgi_deployment(tasks_backend: Any) -> None:
    from django.core.wsgi import get_wsgi_application
    from django.test import Client

    from errands.contrib.django.dashboard import with_dashboard_wsgi

    site = Browser(wsgi=with_dashboard_wsgi(get_wsgi_application(), "/errands"))
    assert site.get("/errands/").location == "/accounts/login/?next=/errands/"
    staff = Client()
    staff.force_login(make_user("wes", superuser=True))
    site.cookies["sessionid"] = staff.cookies["sessionid"].value
    page = site.get("/errands/queues")
    assert page.status == 200 and b"wes" in page.body
    token = site.cookies["errands_csrf"]
    assert site.post("/errands/queues/emails/pause", {"csrf": token}).status == 303
    assert task_backends["default"].errands.paused_queues() == ["emails"]
    assert site.get("/accounts/login/").status == 200  # Django's own views still answer
