"""The schema errands expects, read from the store's own DDL, and how a live schema differs from it.

There is no second copy of the schema here: the expected tables, columns and indexes are
replayed from ``store.dialect.migrations()`` (the statements ``errands migrate`` runs), version by
version.  The reader understands exactly the statement forms errands' DDL uses and raises
:class:`DDLNotUnderstood` on anything else, so a new kind of migration statement fails the
doctor's tests instead of silently escaping the drift check.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..store.dialects.base import Step

if TYPE_CHECKING:
    from ..store import Store


class DDLNotUnderstood(Exception):
    """A migration statement of a form this reader does not know: teach it here."""


@dataclass(frozen=True)
class IndexSpec:
    """An index: the table it belongs to, its column names in order and its partial-index
    predicate (normalised by :func:`normalise_predicate`; None for a full index)."""

    table: str
    columns: tuple[str, ...]
    predicate: str | None = None
    unique: bool = False
    descending: tuple[bool, ...] | None = None
    """Per column, whether it is in descending order, as a live catalog says.  None where nobody
    read it: the DDL replay leaves it out and the drift check does not compare it (MySQL before
    8 and MariaDB before 10.8 accept ``DESC`` in an index and ignore it)."""


@dataclass(frozen=True)
class ExpectedIndex:
    spec: IndexSpec
    since: int
    statement: str
    """A statement that creates this index alone (for the fix text)."""


@dataclass(frozen=True)
class ExpectedColumn:
    definition: str
    since: int


@dataclass
class ExpectedTable:
    since: int
    columns: dict[str, ExpectedColumn] = field(default_factory=dict)
    options: str = ""
    """What follows the column list of its CREATE TABLE (PostgreSQL's WITH (...) storage options)."""


@dataclass
class ExpectedSchema:
    version: int
    tables: dict[str, ExpectedTable] = field(default_factory=dict)
    indexes: dict[str, ExpectedIndex] = field(default_factory=dict)


@dataclass(frozen=True)
class LiveColumn:
    """A column as the catalog describes it, each part spelled as that server spells it: its type,
    whether it takes NULL, and its default expression (None: no default)."""

    type: str
    nullable: bool
    default: str | None


@dataclass
class LiveSchema:
    """What the database holds, as the dialect's catalog says: errands-prefixed tables only, each
    with its columns in the table's order.  Names are lower case.  ``invalid`` lists indexes the
    server keeps but does not use (PostgreSQL: a failed ``CREATE INDEX CONCURRENTLY``).  The drift
    check compares names only; the rest is there for the tests that compare two live schemas
    (a database migrated one version at a time against one migrated in one go)."""

    tables: dict[str, dict[str, LiveColumn]] = field(default_factory=dict)
    indexes: dict[str, IndexSpec] = field(default_factory=dict)
    invalid: set[str] = field(default_factory=set)


def normalise_predicate(text: str | None) -> str | None:
    """``((reserved_by IS NULL) AND (blocked_by IS NULL))`` and ``reserved_by IS NULL AND
    blocked_by IS NULL`` compare equal: catalogs add parentheses and change spacing."""
    if text is None or not text.strip():
        return None
    return re.sub(r"[\s()`\"]+", "", text).lower()


def _ident(token: str) -> str:
    return token.strip().strip('`"').lower()


def _matching_paren(text: str, start: int) -> int:
    """Index of the ``)`` closing the ``(`` at ``start``."""
    depth = 0
    for i in range(start, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    raise DDLNotUnderstood(f"unbalanced parentheses in: {text}")


def _split_top(text: str) -> list[str]:
    """Split at commas outside parentheses (column lists, ALTER TABLE actions)."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return [p for p in parts if p]


def _columns(text: str) -> tuple[str, ...]:
    """``queue, priority DESC, id`` -> ('queue', 'priority', 'id') (prefix lengths dropped too)."""
    return tuple(_ident(re.split(r"[\s(]", part.strip(), maxsplit=1)[0]) for part in _split_top(text))


_CREATE_TABLE = re.compile(r"CREATE TABLE (?:IF NOT EXISTS )?(\S+) \(", re.I)
_CREATE_INDEX = re.compile(r"CREATE (UNIQUE )?INDEX (?:IF NOT EXISTS )?(\S+) ON (\S+) \((.*?)\)(?: WHERE (.*))?$",
                           re.I | re.S)
_DROP_INDEX = re.compile(r"DROP INDEX (?:IF EXISTS )?(\S+)$", re.I)
_ALTER_TABLE = re.compile(r"ALTER TABLE (\S+) (.*)$", re.I | re.S)
_DATA_CHANGE = re.compile(r"(UPDATE|INSERT|DELETE)\b", re.I)
"""A migration step that changes rows, not the schema (``blocked_by`` counting dependencies)."""
_ROUTINE = re.compile(r"(CREATE (OR REPLACE )?(FUNCTION|PROCEDURE|VIEW|TRIGGER)( IF NOT EXISTS)?"
                      r"|DROP PROCEDURE IF EXISTS|COMMENT ON FUNCTION) \S*enqueue(_insert)?\b", re.I)
"""A step that makes no table, column or index: the SQL enqueue entry point ``<prefix>enqueue`` (a
function, a procedure, or a view and its trigger), which the drift check does not compare; any other
routine, view or trigger is still refused."""
_KEY_DEF = re.compile(r"(UNIQUE )?(?:KEY|INDEX) (\S+) \((.*)\)$", re.I | re.S)
_SKIPPED_DEFS = re.compile(r"(PRIMARY KEY|CONSTRAINT|FOREIGN KEY|UNIQUE \(|CHECK)\b", re.I)


class _Replay:
    """Applies DDL statements to an in-memory picture of the schema."""

    def __init__(self, version: int) -> None:
        self.schema = ExpectedSchema(version)
        self.version = 0

    def apply(self, statement: str) -> None:
        sql = " ".join(statement.split())
        if m := _CREATE_TABLE.match(sql):
            self._create_table(sql, _ident(m.group(1)), m.end() - 1)
        elif m := _CREATE_INDEX.match(sql):
            spec = IndexSpec(_ident(m.group(3)), _columns(m.group(4)), normalise_predicate(m.group(5)),
                             bool(m.group(1)))
            self._add_index(_ident(m.group(2)), spec, sql)
        elif m := _DROP_INDEX.match(sql):
            self.schema.indexes.pop(_ident(m.group(1)), None)
        elif m := _ALTER_TABLE.match(sql):
            table = _ident(m.group(1))
            for action in _split_top(m.group(2)):
                self._alter(table, action, sql)
        elif _DATA_CHANGE.match(sql) or _ROUTINE.match(sql):
            return
        else:
            raise DDLNotUnderstood(f"diagnostics cannot read this migration statement: {sql}")

    def _create_table(self, sql: str, table: str, open_at: int) -> None:
        close_at = _matching_paren(sql, open_at)
        expected = self.schema.tables.get(table)
        if expected is None:  # IF NOT EXISTS: a second CREATE changes nothing
            expected = self.schema.tables[table] = ExpectedTable(self.version, options=sql[close_at + 1:].strip())
            for definition in _split_top(sql[open_at + 1:close_at]):
                if key := _KEY_DEF.match(definition):
                    spec = IndexSpec(table, _columns(key.group(3)), None, bool(key.group(1)))
                    self._add_index(_ident(key.group(2)), spec, f"ALTER TABLE {table} ADD {definition}")
                elif not _SKIPPED_DEFS.match(definition):
                    name = _ident(definition.split()[0])
                    expected.columns[name] = ExpectedColumn(definition, self.version)

    def _alter(self, table: str, action: str, sql: str) -> None:
        words = action.split()
        head = " ".join(words[:2]).upper()
        if head == "ADD COLUMN":
            definition = re.sub(r"^ADD COLUMN (IF NOT EXISTS )?", "", action, flags=re.I)
            self._table(table, sql).columns[_ident(definition.split()[0])] = ExpectedColumn(definition, self.version)
        elif head == "DROP COLUMN":
            self._table(table, sql).columns.pop(_ident(words[-1]), None)
        elif head in ("DROP KEY", "DROP INDEX"):
            self.schema.indexes.pop(_ident(words[2]), None)
        elif words[0].upper() == "SET" and action[3:].strip().startswith("("):  # storage parameters
            self._set_options(self._table(table, sql), action[3:].strip()[1:-1])
        elif words[0].upper() == "ADD" and (key := _KEY_DEF.match(action[4:].strip())):
            spec = IndexSpec(table, _columns(key.group(3)), None, bool(key.group(1)))
            self._add_index(_ident(key.group(2)), spec, f"ALTER TABLE {table} {action}")
        else:
            raise DDLNotUnderstood(f"diagnostics cannot read this ALTER TABLE action ({action}) in: {sql}")

    @staticmethod
    def _set_options(table: ExpectedTable, pairs: str) -> None:
        """``ALTER TABLE t SET (a = 1)``: the option joins (or replaces) those of the CREATE TABLE's ``WITH``."""
        m = re.search(r"WITH \((.*)\)", table.options, re.I | re.S)
        have = dict(p.split("=", 1) for p in m.group(1).split(",")) if m else {}
        have = {k.strip(): v.strip() for k, v in have.items()}
        have |= {k.strip(): v.strip() for k, v in (p.split("=", 1) for p in pairs.split(","))}
        table.options = "WITH (" + ", ".join(f"{k} = {v}" for k, v in have.items()) + ")"

    def _table(self, table: str, sql: str) -> ExpectedTable:
        if table not in self.schema.tables:
            raise DDLNotUnderstood(f"ALTER TABLE of a table no earlier statement created: {sql}")
        return self.schema.tables[table]

    def _add_index(self, name: str, spec: IndexSpec, statement: str) -> None:
        if name not in self.schema.indexes:  # IF NOT EXISTS
            self.schema.indexes[name] = ExpectedIndex(spec, self.version, statement)


def expected_schema(store: Store, up_to: int | None = None) -> ExpectedSchema:
    """The tables, columns and indexes that ``errands migrate`` leaves at version ``up_to``
    (default: the version this code needs), replayed from the store's own DDL."""
    target = store.dialect.schema_version if up_to is None else up_to
    replay = _Replay(target)
    replay.apply(store.dialect.q(store.dialect.schema_table_ddl))
    for version, steps in store.dialect.migrations():
        if version > target:
            break
        replay.version = version
        for step in steps:
            replay.apply(step.sql if isinstance(step, Step) else step)
    return replay.schema


@dataclass
class Drift:
    """Differences between the expected and the live schema, each as a sentence."""

    missing_tables: list[str] = field(default_factory=list)
    missing_columns: list[tuple[str, str, str]] = field(default_factory=list)
    """(table, column, definition from the DDL)"""
    missing_indexes: list[str] = field(default_factory=list)
    changed_indexes: list[tuple[str, str]] = field(default_factory=list)
    """(index, what differs)"""
    extra_tables: list[str] = field(default_factory=list)
    extra_columns: list[tuple[str, str]] = field(default_factory=list)
    extra_indexes: list[tuple[str, str]] = field(default_factory=list)
    """(index, table)"""

    @property
    def missing(self) -> bool:
        return bool(self.missing_tables or self.missing_columns or self.missing_indexes or self.changed_indexes)


def _as_later(name: str, found: IndexSpec | None, live: LiveSchema, later: ExpectedSchema | None) -> bool:
    """Whether a live index is as a later version of errands' DDL defines it."""
    spec = later.indexes.get(name) if later else None
    return (found is not None and spec is not None and name not in live.invalid
            and (found.table, found.columns, found.predicate) == (spec.spec.table, spec.spec.columns,
                                                                  spec.spec.predicate))


def _index_change(name: str, spec: IndexSpec, found: IndexSpec, live: LiveSchema) -> str | None:
    """How a live index differs from the one errands expects (None: it does not)."""
    if name in live.invalid:
        return "exists but is marked invalid (an interrupted build)"
    if found.table != spec.table:
        return f"is on table {found.table}, not {spec.table}"
    if found.columns != spec.columns:
        return f"covers ({', '.join(found.columns)}), errands expects ({', '.join(spec.columns)})"
    if found.predicate != spec.predicate:
        return f"has the condition {found.predicate or 'none'}, errands expects {spec.predicate or 'none'}"
    return None


def compare(expected: ExpectedSchema, live: LiveSchema, *, ignore: ExpectedSchema | None = None) -> Drift:
    """What ``live`` lacks or has beyond ``expected``.  Objects of ``ignore`` (the code's full
    schema, when the recorded version is older) are not called extra, and an index as ``ignore``
    defines it is not called changed."""
    drift = Drift()
    later_tables = set(ignore.tables) if ignore else set()
    later_indexes = set(ignore.indexes) if ignore else set()
    for table, spec in expected.tables.items():
        columns = live.tables.get(table)
        if columns is None:
            drift.missing_tables.append(table)
            continue
        for column, col in spec.columns.items():
            if column not in columns:
                drift.missing_columns.append((table, column, col.definition))
        later_columns = set(ignore.tables[table].columns) if ignore and table in ignore.tables else set()
        drift.extra_columns += [(table, c) for c in sorted(set(columns) - set(spec.columns) - later_columns)]
    for name, index in expected.indexes.items():
        if index.spec.table in drift.missing_tables:
            continue
        found = live.indexes.get(name)
        if found is None:
            drift.missing_indexes.append(name)
        elif not _as_later(name, found, live, ignore):  # as a later version redefined it: not a change
            why = _index_change(name, index.spec, found, live)
            if why:
                drift.changed_indexes.append((name, why))
    drift.extra_tables = sorted(set(live.tables) - set(expected.tables) - later_tables)
    drift.extra_indexes = sorted((name, spec.table) for name, spec in live.indexes.items()
                                 if name not in expected.indexes and name not in later_indexes)
    return drift
