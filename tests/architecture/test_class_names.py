"""Each class name is defined once in ``src/errands``: a reader (and a traceback, a log line, an
OpenAPI schema) that names a class names one thing.  Django's required names are the exception:
every migration module defines ``Migration`` and every management command ``Command``."""

from __future__ import annotations

import ast
import pathlib
from collections import defaultdict

SRC = pathlib.Path(__file__).resolve().parents[2] / "src" / "errands"
DJANGO = SRC / "contrib" / "django"
REQUIRED_BY_DJANGO = {"Migration": DJANGO / "migrations", "Command": DJANGO / "management" / "commands"}


def test_every_class_name_is_defined_once() -> None:
    where: dict[str, list[pathlib.Path]] = defaultdict(list)
    for path in sorted(SRC.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ClassDef):
                folder = REQUIRED_BY_DJANGO.get(node.name)
                if folder is None or path.parent != folder:
                    where[node.name].append(path.relative_to(SRC))
    assert {name: paths for name, paths in where.items() if len(paths) > 1} == {}
