"""Password hashing with scrypt (``hashlib.scrypt``, a memory-hard KDF in the standard library).

Stored form: ``scrypt$n$r$p$salt_b64$hash_b64``.  Verification recomputes the hash with
the stored parameters and compares in constant time, so the parameters can be raised
later without invalidating existing hashes.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

N, R, P = 2**14, 8, 1
"""scrypt cost parameters: 16 MiB of memory and about 50 ms per hash on this machine."""
MIN_LENGTH = 10


def hash_password(password: str) -> str:
    if len(password) < MIN_LENGTH:
        raise ValueError(f"a password needs at least {MIN_LENGTH} characters")
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=64 * 1024 * 1024, dklen=32)
    return "$".join(["scrypt", str(N), str(R), str(P), _b64(salt), _b64(digest)])


def verify_password(password: str, stored: str) -> bool:
    try:
        kind, n, r, p, salt, digest = stored.split("$")
        if kind != "scrypt":
            return False
        expected = base64.b64decode(digest)
        actual = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n), r=int(r), p=int(p),
                                maxmem=64 * 1024 * 1024, dklen=len(expected))
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(actual, expected)


_DUMMY = None


def burn_time(password: str) -> None:
    """Spend as long as a real verification, so an unknown user takes as long as a wrong password."""
    global _DUMMY
    if _DUMMY is None:
        _DUMMY = hash_password("x" * MIN_LENGTH)
    verify_password(password, _DUMMY)


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()
