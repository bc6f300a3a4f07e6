"""Kept for imports of ``errands.dashboard.passwords``: password hashing is an account matter and
lives in :mod:`errands.services.passwords`, which the CLI and the dashboard both use."""

from __future__ import annotations

from ..services.passwords import MIN_LENGTH, burn_time, hash_password, verify_password

__all__ = ["MIN_LENGTH", "burn_time", "hash_password", "verify_password"]
