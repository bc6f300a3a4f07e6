"""Random tokens and what the database keeps of them: sessions, remember-me validators and CSRF
tokens are all made and compared here, so accounts (services) and the web layer agree on them."""

from __future__ import annotations

import hashlib
import hmac
import secrets


def new_token(nbytes: int = 32) -> str:
    """A URL-safe random token (``nbytes`` of entropy)."""
    return secrets.token_urlsafe(nbytes)


def digest(token: str) -> str:
    """What the database keeps of a session token or remember-me validator: a stolen table holds
    no usable token."""
    return hashlib.sha256(token.encode()).hexdigest()


def same(a: str | None, b: str | None) -> bool:
    """Constant-time comparison of two tokens (False if either is missing), so timing tells no prefix."""
    if not a or not b:
        return False
    return hmac.compare_digest(a.encode(), b.encode())
