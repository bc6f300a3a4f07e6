"""The operator's dashboard: ``create_dashboard(app)`` is an ASGI app (needs ``errands[dashboard]``)."""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
    import starlette  # noqa: F401
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    from ..core.errors import ConfigurationError

    raise ConfigurationError("the dashboard needs its extra: pip install 'errands[dashboard]'") from exc

from .app import create_dashboard
from .auth import AuthSettings, Principal
from .limits import ApiLimits

__all__ = ["ApiLimits", "AuthSettings", "Principal", "create_dashboard"]
