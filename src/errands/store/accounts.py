"""Store verbs for the dashboard's people: users, sessions, remember-me tokens, login
attempts and the audit log.

Secrets never reach the database in the clear: session tokens and remember-me
validators are stored as SHA-256 digests, passwords as scrypt hashes made by
:mod:`errands.services.passwords`.  Everything lives in the database so that any
number of dashboard processes share sessions, rate limits and the audit trail.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

from .database import Database
from .driver import Cursor, Row, fetch_row, fetch_rows, scalar

USER_COLUMNS = "id, username, password_hash, role, disabled, theme, created_at, last_login_at"
_JOINED_USER = ", ".join(f"u.{c} AS {c}" for c in USER_COLUMNS.split(", "))
"""``USER_COLUMNS`` of the users table joined as ``u``, each named as it is in the table (a
qualified column without ``AS`` has no name SQLite promises)."""


class UserRow(NamedTuple):
    id: int
    username: str
    password_hash: str
    role: str
    """"admin" (may act) or "viewer" (read only)."""
    disabled: bool
    theme: str
    """"auto" (follow the OS), "light" or "dark"."""
    created_at: datetime
    last_login_at: datetime | None


class SessionRow(NamedTuple):
    user: UserRow
    csrf: str
    expires_at: datetime


USED = "~"
"""The mark of a used (rotated) remember-me token in its ``validator_hash``."""


def used_mark(validator_hash: str) -> str:
    """What a used token keeps of its digest: the mark, then all but the digest's last digit."""
    return USED + validator_hash[:63]


class RememberRow(NamedTuple):
    validator_hash: str
    """The validator's digest, or for a used token :func:`used_mark` of it."""
    user: UserRow
    used: bool
    """Used once already: presenting it again is a reuse (unless ``recently_used``)."""
    recently_used: bool
    """Used within the grace period: the same browser's parallel requests, not a theft."""


class AuditRow(NamedTuple):
    id: int
    at: datetime
    actor: str
    action: str
    target: str
    detail: str | None


class AccountStore:
    """Dashboard users, their sessions and tokens, login attempts and the audit log."""

    def __init__(self, db: Database) -> None:
        self.db = db
        self.d = db.dialect

    def _user(self, r: Row) -> UserRow:
        """A row holding ``USER_COLUMNS`` (alone, or joined with another table's) as a :class:`UserRow`."""
        t = self.d.to_datetime
        last = r["last_login_at"]
        return UserRow(int(r["id"]), r["username"], r["password_hash"], r["role"], bool(r["disabled"]), r["theme"],
                       t(r["created_at"]), None if last is None else t(last))

    # ------------------------------------------------------------------ users
    def create_user(self, username: str, password_hash: str, role: str) -> int:
        def insert(cur: Cursor) -> int:
            return self.d.insert_one(cur, self.d.q("INSERT INTO {users} (username, password_hash, role, disabled, "
                                                   "theme, created_at) VALUES ({p}, {p}, {p}, 0, 'auto', {now})"),
                                    [username, password_hash, role])

        return self.db.run(insert, write=True)

    def get_user(self, username: str) -> UserRow | None:
        def read(cur: Cursor) -> UserRow | None:
            cur.execute(self.d.q("SELECT " + USER_COLUMNS + " FROM {users} WHERE username = {p}"), (username,))
            r = fetch_row(cur)
            return None if r is None else self._user(r)

        return self.db.run(read)

    def list_users(self, search: str | None = None, limit: int = 200) -> list[UserRow]:
        def read(cur: Cursor) -> list[UserRow]:
            where, params = ("", []) if not search else (" WHERE username LIKE {p}" + self.d.like_escape,
                                                        [f"%{like_pattern(search)}%"])
            cur.execute(self.d.q("SELECT " + USER_COLUMNS + " FROM {users}" + where + " ORDER BY username LIMIT {p}"),
                        [*params, int(limit)])
            return [self._user(r) for r in fetch_rows(cur)]

        return self.db.run(read)

    def update_user(self, username: str, *, password_hash: str | None = None, disabled: bool | None = None,
                    theme: str | None = None, role: str | None = None) -> bool:
        changes = {k: v for k, v in dict(password_hash=password_hash, disabled=None if disabled is None else
                                         int(disabled), theme=theme, role=role).items() if v is not None}
        if not changes:
            return False

        def update(cur: Cursor) -> bool:
            sets = ", ".join(f"{k} = {{p}}" for k in changes)
            cur.execute(self.d.q("UPDATE {users} SET " + sets + " WHERE username = {p}"), [*changes.values(), username])
            found = cur.rowcount == 1
            if not found:  # MySQL counts changed rows, not matched ones: setting a value it already has is 0
                cur.execute(self.d.q("SELECT 1 FROM {users} WHERE username = {p}"), (username,))
                found = fetch_row(cur) is not None
            if found and (password_hash is not None or disabled):
                # A new password or a disabled account ends every session and remember-me token.
                for table in ("{sessions}", "{remember}"):
                    cur.execute(self.d.q(f"DELETE FROM {table} WHERE user_id = "
                                       "(SELECT id FROM {users} WHERE username = {p})"), (username,))
            return bool(found)

        return self.db.run(update, write=True)

    def count_users(self) -> int:
        def read(cur: Cursor) -> int:
            cur.execute(self.d.q("SELECT COUNT(*) AS n FROM {users}"))
            return int(scalar(cur))

        return self.db.run(read)

    # ------------------------------------------------------------------ sessions
    def create_session(self, token_hash: str, user_id: int, csrf: str, ttl: float) -> None:
        def insert(cur: Cursor) -> None:
            cur.execute(self.d.q("INSERT INTO {sessions} (token_hash, user_id, csrf, created_at, expires_at) VALUES "
                               "({p}, {p}, {p}, {now}, {now_plus})"), (token_hash, user_id, csrf, float(ttl)))
            cur.execute(self.d.q("UPDATE {users} SET last_login_at = {now} WHERE id = {p}"), (user_id,))

        self.db.run(insert, write=True)

    def get_session(self, token_hash: str) -> SessionRow | None:
        def read(cur: Cursor) -> SessionRow | None:
            cur.execute(self.d.q("SELECT " + _JOINED_USER + ", s.csrf AS csrf, s.expires_at AS expires_at "
                                 "FROM {sessions} s JOIN {users} u ON u.id = s.user_id "
                                 "WHERE s.token_hash = {p} AND s.expires_at > {now} AND u.disabled = 0"), (token_hash,))
            r = fetch_row(cur)
            return None if r is None else SessionRow(self._user(r), r["csrf"], self.d.to_datetime(r["expires_at"]))

        return self.db.run(read)

    def delete_session(self, token_hash: str) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {sessions} WHERE token_hash = {p}"), (token_hash,)))

    # ------------------------------------------------------------------ remember me
    def create_remember(self, selector: str, validator_hash: str, user_id: int, ttl: float) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q(
            "INSERT INTO {remember} (selector, validator_hash, user_id, expires_at) "
            "VALUES ({p}, {p}, {p}, {now_plus})"),
            (selector, validator_hash, user_id, float(ttl))))

    def use_remember(self, selector: str, *, keep_for: float, grace: float) -> RememberRow | None:
        """Use the token ``selector`` once: return it as it was, and mark it used (rotation).

        A used token is not deleted but kept ``keep_for`` seconds more, its digest marked with
        :data:`USED`, so that a second use shows as what it is: a copy of the cookie in another
        hand (reuse).  The mark lives in ``validator_hash`` (a digest is 64 hex digits, the mark
        takes the first of them), and the time of use in ``expires_at`` (use + ``keep_for``):
        no schema change.  ``recently_used`` says the token was used less than ``grace`` seconds ago."""

        def use(cur: Cursor) -> RememberRow | None:
            cur.execute(self.d.q("SELECT r.validator_hash AS validator_hash, "
                                 "CASE WHEN r.expires_at > {now_plus} THEN 1 ELSE 0 END AS in_grace, "
                                 + _JOINED_USER + " FROM {remember} r JOIN {users} u ON u.id = r.user_id "
                                 "WHERE r.selector = {p} AND r.expires_at > {now} AND u.disabled = 0")
                        + self.d.lock_rows, (float(keep_for) - float(grace), selector))
            r = fetch_row(cur)
            if r is None:
                return None
            validator_hash = r["validator_hash"]
            used = str(validator_hash).startswith(USED)
            if not used:
                cur.execute(self.d.q("UPDATE {remember} SET validator_hash = {p}, expires_at = {now_plus} "
                                   "WHERE selector = {p}"), (used_mark(validator_hash), float(keep_for), selector))
            return RememberRow(validator_hash, self._user(r), used, used and bool(r["in_grace"]))

        return self.db.run(use, write=True)

    def forget_remember(self, selector: str) -> None:
        """Delete one remember-me token (signing out on this browser)."""
        self.db.run(lambda cur: cur.execute(self.d.q("DELETE FROM {remember} WHERE selector = {p}"), (selector,)),
                    write=True)

    def end_everything_of(self, user_id: int) -> None:
        """End every session and remember-me token of an account (a stolen token was seen)."""

        def delete(cur: Cursor) -> None:
            cur.execute(self.d.q("DELETE FROM {sessions} WHERE user_id = {p}"), (user_id,))
            cur.execute(self.d.q("DELETE FROM {remember} WHERE user_id = {p}"), (user_id,))

        self.db.run(delete, write=True)

    # ------------------------------------------------------------------ login attempts
    def record_login(self, username: str, ip: str, ok: bool, *, refused: bool = False) -> None:
        """One attempt: ``ok`` 1 (signed in), 0 (a failure: the only kind the limits count) or, for an
        attempt the limits refused without checking its password, 2 (kept for the record only, so
        refused attempts never lengthen a lock)."""
        self.db.run(lambda cur: cur.execute(self.d.q(
            "INSERT INTO {login_attempts} (username, ip, at, ok) VALUES ({p}, {p}, {now}, {p})"),
            (username[:100], ip[:64], 2 if refused else 1 if ok else 0)))

    def failed_logins(self, *, username: str | None = None, ip: str | None = None, window: float) -> int:
        """Failed attempts for an account or from an address within the last ``window`` seconds."""

        def read(cur: Cursor) -> int:
            column, value = ("username", username) if username is not None else ("ip", ip)
            cur.execute(self.d.q(f"SELECT COUNT(*) AS n FROM {{login_attempts}} WHERE {column} = {{p}} AND ok = 0 "
                               "AND at > {now_plus}"), (value, -float(window)))
            return int(scalar(cur))

        return self.db.run(read)

    # ------------------------------------------------------------------ audit
    def audit(self, actor: str, action: str, target: str, detail: str | None = None) -> None:
        self.db.run(lambda cur: cur.execute(self.d.q(
            "INSERT INTO {audit} (at, actor, action, target, detail) VALUES ({now}, {p}, {p}, {p}, {p})"),
            (actor[:100], action[:50], target[:255], None if detail is None else detail[:2000])))

    def audit_log(self, limit: int = 100, before_id: int | None = None) -> list[AuditRow]:
        def read(cur: Cursor) -> list[AuditRow]:
            where, params = ("", []) if before_id is None else (" WHERE id < {p}", [before_id])
            cur.execute(self.d.q("SELECT id, at, actor, action, target, detail FROM {audit}" + where +
                               " ORDER BY id DESC LIMIT {p}"), [*params, int(limit)])
            t = self.d.to_datetime
            return [AuditRow(int(r["id"]), t(r["at"]), r["actor"], r["action"], r["target"], r["detail"])
                    for r in fetch_rows(cur)]

        return self.db.run(read)

    def prune(self) -> None:
        """Forget expired sessions and tokens, and login attempts older than a day."""

        def delete(cur: Cursor) -> None:
            cur.execute(self.d.q("DELETE FROM {sessions} WHERE expires_at < {now}"))
            cur.execute(self.d.q("DELETE FROM {remember} WHERE expires_at < {now}"))
            cur.execute(self.d.q("DELETE FROM {login_attempts} WHERE at < {now_plus}"), (-86400.0,))

        self.db.run(delete, write=True)


def like_pattern(text: str) -> str:
    """``text`` for a LIKE pattern, its wildcards taken literally."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
