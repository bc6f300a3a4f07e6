"""``errands doctor``: diagnose a deployment and say how to fix what needs fixing.

``diagnose(app)`` runs every check against the app's database and returns a
:class:`Report`; each :class:`Check` carries a status, a sentence and, when something is
wrong, the fix in words.  A report needs action (exit code 1) exactly when a check failed.
"""

from __future__ import annotations

from .checks import diagnose, refused_connection
from .model import Check, Report, Status

__all__ = ["Check", "Report", "Status", "diagnose", "refused_connection"]
