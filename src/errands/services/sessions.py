"""Signing in and out of the dashboard's own accounts: passwords, sessions, remember-me tokens and
the failed-login limits.  An account matter, so it lives here and not in the web layer, which only
turns what these functions return into cookies.

A session is a random token whose SHA-256 the database keeps, with the session's CSRF token.
"Remember me" is a second token ``selector:validator``; the database keeps the validator's digest,
and each use replaces the token (rotation).  A used token is kept, marked used, for as long as a
token lives: when it comes back, two browsers hold copies of one cookie, so the account's every
session and token end and the audit log says so (reuse detection).  Only a second use within
``remember_reuse_grace`` seconds of the first is let go (signed in as nobody, nothing ended): two
tabs a restarted browser restores at once present the same token.

Failed logins are counted per account and per client address in the database, so every dashboard
process sees the same limits; :func:`login_refused` is the policy.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core.errors import StoreError
from ..store.accounts import used_mark
from . import passwords
from .tokens import digest, new_token, same

if TYPE_CHECKING:
    from ..app import Errands

TOO_MANY = "Too many failed attempts. Wait a few minutes and try again."
REUSED = ("a remember-me token was used a second time (a copy of the cookie): every session and remember-me "
          "token of the account ended")
WRONG = "Wrong user name or password."


class SessionPolicy(Protocol):
    """The limits sessions obey (the dashboard's ``AuthSettings`` is one)."""

    session_ttl: float
    remember_ttl: float
    max_failures_per_account: int
    max_failures_per_address: int
    failure_window: float
    remember_reuse_grace: float


@dataclass(frozen=True)
class SignedIn:
    """Who a session belongs to, and the tokens a new session hands out (empty when none is new)."""

    username: str
    role: str
    theme: str
    csrf: str
    session_token: str = ""
    """A new session's token, for the session cookie."""
    remember_token: str = ""
    """A new ``selector:validator``, for the remember-me cookie."""


def current(app: Errands, token: str | None, remembered: str | None, policy: SessionPolicy,
            address: str = "unknown") -> SignedIn | None:
    """The account behind a session token or, failing that, a remember-me token (which is used up
    and replaced by a new session).  A used token presented again, or a validator that does not
    match its selector, means the cookie was copied: every session and remember-me token of that
    account ends, and the audit log says so."""
    store = app.store
    if token:
        session = store.accounts.get_session(digest(token))
        if session is not None:
            u = session.user
            return SignedIn(u.username, u.role, u.theme, session.csrf)
    if not remembered or ":" not in remembered:
        return None
    selector, validator = remembered.split(":", 1)
    found = store.accounts.use_remember(selector, keep_for=policy.remember_ttl, grace=policy.remember_reuse_grace)
    if found is None:
        return None
    if not found.used and same(found.validator_hash, digest(validator)):
        return start(app, found.user, remember=True, policy=policy)
    if found.recently_used and same(found.validator_hash, used_mark(digest(validator))):
        return None  # the same browser's parallel request: the first one carries the new token
    store.accounts.end_everything_of(found.user.id)
    store.accounts.audit(found.user.username, "remember-reuse", f"user {found.user.username}",
                         f"{REUSED}; seen from {address}")
    log.warning("remember-me token of %s reused from %s: its sessions and tokens ended", found.user.username,
                address)
    return None


def start(app: Errands, user: Any, *, remember: bool, policy: SessionPolicy) -> SignedIn:
    """A new session for ``user`` (a store user row), and a remember-me token when asked."""
    token, csrf = new_token(), new_token()
    app.store.accounts.create_session(digest(token), user.id, csrf, policy.session_ttl)
    remember_token = ""
    if remember:
        selector, validator = new_token(12), new_token()
        app.store.accounts.create_remember(selector, digest(validator), user.id, policy.remember_ttl)
        remember_token = f"{selector}:{validator}"
    return SignedIn(user.username, user.role, user.theme, csrf, token, remember_token)


PRUNE_EVERY = 600.0
"""Seconds between two prunes of expired sessions, tokens and old login attempts by one process."""
_prune_lock = threading.Lock()
_next_prune = 0.0
log = logging.getLogger("errands.dashboard")


def prune_now_and_then(app: Errands) -> None:
    """Forget expired sessions and tokens and day-old login attempts, at most every PRUNE_EVERY
    seconds per process.  Sign-ins are what fill these tables, so signing in is what empties them:
    the worker, which never reads them, does not carry the dashboard's housekeeping."""
    global _next_prune
    with _prune_lock:
        if time.monotonic() < _next_prune:
            return
        _next_prune = time.monotonic() + PRUNE_EVERY
    try:
        app.store.accounts.prune()
    except StoreError as exc:  # the sign-in that follows reports the database; pruning can wait
        log.warning("could not prune expired sessions: %s", exc)


def sign_in(app: Errands, username: str, password: str, address: str, remember: bool, policy: SessionPolicy
            ) -> tuple[SignedIn | None, str]:
    """Check a password against the limits and the account; returns (the new session or None, the
    message for the login form).  An unknown or disabled account costs as long as a wrong password,
    so timing tells no user name; every attempt is recorded, a success also in the audit log."""
    prune_now_and_then(app)
    store = app.store
    if login_refused(store.accounts.failed_logins(username=username, window=policy.failure_window),
                     store.accounts.failed_logins(ip=address, window=policy.failure_window), policy):
        store.accounts.record_login(username, address, False, refused=True)
        return None, TOO_MANY
    user = store.accounts.get_user(username)
    if user is None or user.disabled:
        passwords.burn_time(password)
        ok = False
    else:
        ok = passwords.verify_password(password, user.password_hash)
    store.accounts.record_login(username, address, ok)
    if not ok or user is None:
        return None, WRONG
    signed = start(app, user, remember=remember, policy=policy)
    store.accounts.audit(user.username, "login", f"from {address}")
    return signed, ""


def login_refused(account_failures: int, address_failures: int, policy: SessionPolicy) -> bool:
    """Whether the limits refuse a login attempt without checking its password.

    The counts are *failures* (wrong passwords) within ``failure_window``; attempts refused here
    are recorded apart and never counted, so trying during a lock does not lengthen it.

    * An address with ``max_failures_per_address`` failures (on any accounts) is refused.
    * An account with ``max_failures_per_account`` failures is locked, but only for addresses with a
      failure of their own in the window: the real user, from an address that has not been guessing,
      still signs in with the right password, however often an attacker elsewhere keeps the account
      locked.  The price: each fresh address an attacker owns gets a guess at a locked account.
    """
    if address_failures >= policy.max_failures_per_address:
        return True
    return account_failures >= policy.max_failures_per_account and address_failures > 0


def sign_out(app: Errands, token: str | None, remembered: str | None) -> None:
    """End a session and its remember-me token; a database that fails meanwhile does not keep the
    user signed in on this browser (the cookies go anyway), so errors are swallowed."""
    if token:
        try:
            app.store.accounts.delete_session(digest(token))
        except StoreError:
            pass
    if remembered and ":" in remembered:
        try:
            app.store.accounts.forget_remember(remembered.split(":", 1)[0])
        except StoreError:
            pass
