"""What every check is handed: the app, its store, and the store's connection without side effects.

``errands doctor`` must look without touching: the store's own ``run()`` first makes sure
the schema is current, and on SQLite that means creating or upgrading the tables, which
would hide exactly what the doctor is asked to find.  So checks read through
:meth:`DoctorContext.read`, the store's connection and error mapping minus that step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from .schema import Drift, ExpectedSchema, LiveSchema

if TYPE_CHECKING:
    from ..app import Errands
    from ..store import Store

T = TypeVar("T")


@dataclass
class DoctorContext:
    """What one run of ``errands doctor`` shares among its checks (the CLI's click object is
    ``errands.cli.context.Context``)."""

    app: Errands
    store: Store
    expected: ExpectedSchema
    """The schema this code needs (the store's DDL replayed to its current version)."""
    before: dict[str, Any] = field(default_factory=dict)
    """What the dialect saw before the first connection (SQLite: the file header)."""
    recorded_version: int | None = None
    live: LiveSchema | None = None
    drift: Drift | None = None
    """How ``live`` differs from what the recorded version put in place (the schema_drift check
    finds it; the claim_index check reads its verdict on the claim index)."""

    def read(self, fn: Callable[[Any], T]) -> T:
        """Run ``fn(cursor)`` on the store's connection, autocommit, errors mapped as the store
        maps them (``StoreUnavailable``, ``StoreError``), and no schema check or auto-migration."""
        return self.store.db.run_unchecked(fn, write=False)

    @property
    def schema_current(self) -> bool:
        """Whether the recorded version is the one this code needs: only then may checks use
        the store's verbs (which would otherwise migrate SQLite or refuse)."""
        return self.recorded_version == self.store.dialect.schema_version
