"""What every dialect checks of its database URL before anything connects.

Each dialect names its own query options beside its SQL (``MYSQL_OPTIONS``, ``URL_OPTIONS``,
``SQLITE_OPTIONS``); this module holds only the mechanics they share, so that every backend refuses
a URL the same way: a :class:`ConfigurationError` naming the problem and the options it knows, with
the password masked.  Never a driver's or ``urllib``'s ``ValueError`` (a port that is not a number,
an unclosed ``[``), and never silence (an option spelt wrong would otherwise do nothing).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple
from urllib.parse import SplitResult, parse_qsl, unquote, urlsplit

from ...core.config import mask_url
from ...core.errors import ConfigurationError


class HostPort(NamedTuple):
    host: str
    port: int

    def __str__(self) -> str:
        return f"[{self.host}]:{self.port}" if ":" in self.host else f"{self.host}:{self.port}"


def refused(url: str, backend: str, problem: str) -> ConfigurationError:
    """The error for a URL that cannot be used: the URL (password masked), then what is wrong."""
    return ConfigurationError(f"{backend} URL {mask_url(url)!r}: {problem}")


def split_url(url: str, backend: str) -> SplitResult:
    """``urlsplit(url)``, whose ``ValueError`` (an unclosed IPv6 ``[``) becomes a ConfigurationError."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise refused(url, backend, f"not a URL ({exc})") from None


def query_options(url: str, backend: str, known: Iterable[str], more: str = "") -> dict[str, str]:
    """The URL's query options, each name's last value; a name not in ``known`` is refused with the
    list of known ones (``more``: what else the backend takes, e.g. libpq's parameters)."""
    known = sorted(set(known))
    pairs = parse_qsl(split_url(url, backend).query, keep_blank_values=True)
    unknown = sorted({name for name, _ in pairs} - set(known))
    if unknown:
        names = ", ".join(repr(n) for n in unknown)
        raise refused(url, backend, f"unknown option{'s' if len(unknown) > 1 else ''} {names}; "
                      f"known options: {', '.join(known)}{more}")
    return dict(pairs)


def host_list(url: str, backend: str, default_port: int) -> list[HostPort]:
    """Every ``host[:port]`` of the URL's comma-separated host list, in order (``[v6]:port`` too);
    empty when the URL names no host.  An empty entry or a port that is not 1-65535 is refused."""
    netloc = split_url(url, backend).netloc.rpartition("@")[2]
    if not netloc:
        return []
    hosts: list[HostPort] = []
    for entry in netloc.split(","):
        host, port = _host_and_port(url, backend, entry)
        hosts.append(HostPort(host, default_port if port is None else port))
    return hosts


def _host_and_port(url: str, backend: str, entry: str) -> tuple[str, int | None]:
    if entry.startswith("["):
        host, _, rest = entry[1:].partition("]")
        if not rest.startswith(":") and rest:
            raise refused(url, backend, f"cannot read host {entry!r} (write an IPv6 address as [::1]:3306)")
        port_text = rest[1:] if rest else None
    else:
        host, colon, port_text_found = entry.rpartition(":") if ":" in entry else (entry, "", "")
        port_text = port_text_found if colon else None
    if not host:
        where = "in the host list" if "," in url else "before the port"
        raise refused(url, backend, f"an empty host {where} ({entry!r}); write host:port, separated by commas")
    if port_text is None or port_text == "":
        return unquote(host), None
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise refused(url, backend, f"port {port_text!r} of host {unquote(host)!r} is not a number from 1 to 65535")
    return unquote(host), int(port_text)


def number_option(url: str, backend: str, name: str, raw: str, *, lowest: float, highest: float,
                  whole: bool = False, wanted: str | None = None) -> float:
    """A numeric option's value, or a ConfigurationError saying which range it must be in (``wanted``:
    said instead of the range, e.g. "seconds, more than 0")."""
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not lowest <= value <= highest or (whole and value != int(value)):
        kind = "a whole number" if whole else "a number"
        raise refused(url, backend, f"{name}={raw!r} must be {wanted or f'{kind} from {lowest:g} to {highest:g}'}")
    return value
