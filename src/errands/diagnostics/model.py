"""What a diagnosis is made of: checks with a status, a sentence, and the fix in words.

The exit-code rule lives here, next to the statuses it reads, so that the command and
anything else that runs a diagnosis agree on what "needs action" means.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


class Status(str, enum.Enum):
    """How a check came out.  Only ``FAIL`` needs action (and makes ``errands doctor`` exit 1)."""

    OK = "ok"
    """As errands expects."""
    INFO = "info"
    """A fact worth knowing (versions, modes); nothing to do."""
    WARN = "warn"
    """errands works, but something is off: look at it when you can."""
    FAIL = "fail"
    """errands does not work as intended until this is fixed: the fix says how."""


@dataclass(frozen=True)
class Check:
    """One finding: ``name`` is a stable identifier (for ``--json`` and tests), ``detail`` one
    sentence for people, ``fix`` what to do when the status is WARN or FAIL, ``items`` the
    lines of a list (workers, missing objects) and ``data`` the figures behind the sentence."""

    name: str
    status: Status
    detail: str
    fix: str | None = None
    items: tuple[str, ...] = ()
    data: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status.value, "detail": self.detail, "fix": self.fix,
                "items": list(self.items), "data": self.data}


EXIT_HEALTHY, EXIT_NEEDS_ACTION = 0, 1


@dataclass
class Report:
    """Every check of one run, in the order they ran."""

    database: str
    """The database URL with its password masked."""
    dialect: str
    checks: list[Check] = field(default_factory=list)

    def add(self, check: Check) -> Check:
        self.checks.append(check)
        return check

    def get(self, name: str) -> Check | None:
        return next((c for c in self.checks if c.name == name), None)

    @property
    def needs_action(self) -> list[Check]:
        return [c for c in self.checks if c.status is Status.FAIL]

    @property
    def exit_code(self) -> int:
        """1 when any check failed (something needs action), else 0: warnings alone never fail a
        deployment check, because errands keeps working correctly while they stand."""
        return EXIT_NEEDS_ACTION if self.needs_action else EXIT_HEALTHY

    def as_dict(self) -> dict[str, Any]:
        return {"database": self.database, "dialect": self.dialect, "exit_code": self.exit_code,
                "needs_action": [c.name for c in self.needs_action],
                "checks": [c.as_dict() for c in self.checks]}


def age_text(seconds: float) -> str:
    """An age people read at a glance, with a tenth of a second where that is all there is."""
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
