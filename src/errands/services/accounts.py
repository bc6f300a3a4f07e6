"""Dashboard accounts: list, create, disable, enable, new password, theme — for the dashboard's users
page and ``errands users`` alike, each change checked the same way and written to the audit log."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..core.errors import ConfigurationError
from .models import UserView
from .passwords import hash_password

if TYPE_CHECKING:
    from ..app import Errands

ROLES = ("admin", "viewer")
ACTIONS = ("create", "disable", "enable", "password")
THEMES = ("auto", "light", "dark")


def change_user(app: Errands, actor: str, action: str, username: str, *, role: str = "viewer",
                password: str = "") -> None:
    """One change to an account; ``ValueError`` says in words why it was refused.

    Hashing a password is slow on purpose (scrypt): web handlers call this in a worker thread."""
    store = app.store
    if action == "create":
        if role not in ROLES or not username:
            raise ValueError(f"give a user name and a role ({' or '.join(ROLES)})")
        if store.accounts.get_user(username) is not None:
            raise ValueError(f"user {username!r} exists already")
        store.accounts.create_user(username, hash_password(password), role)
    elif action in ("disable", "enable"):
        if username == actor and action == "disable":
            raise ValueError("you cannot disable yourself")
        if not store.accounts.update_user(username, disabled=action == "disable"):
            raise ValueError(f"no user {username!r}")
    elif action == "password":
        if not store.accounts.update_user(username, password_hash=hash_password(password)):
            raise ValueError(f"no user {username!r}")
    else:
        raise ConfigurationError(f"unknown account action {action!r}; use one of {', '.join(ACTIONS)}")
    store.accounts.audit(actor, f"user-{action}", f"user {username}", role if action == "create" else None)


def list_users(app: Errands, search: str | None = None) -> list[UserView]:
    """The accounts (whose name contains ``search``), by name: no password hash leaves this layer."""
    return [UserView(u.username, u.role, u.disabled, None if u.last_login_at is None else u.last_login_at.isoformat())
            for u in app.store.accounts.list_users(search or None)]


def count_users(app: Errands) -> int:
    """How many accounts exist: a dashboard with its own logins and none of them refuses to start."""
    return app.store.accounts.count_users()


def set_theme(app: Errands, username: str, theme: str) -> None:
    """A user's own display preference (not an operator action, so not audited)."""
    if theme not in THEMES:
        raise ValueError("unknown theme")
    app.store.accounts.update_user(username, theme=theme)
