"""A page's install lines bring what its samples import (issue 26): the samples run as in a fresh venv
that holds only what the page's ``pip install`` lines install, and errands itself is named as
install.md says (from a checkout or a built wheel: it is not on PyPI yet).

The "fresh venv" is this venv with every other distribution hidden: an import hook answers
``ModuleNotFoundError`` for a module of a distribution the page's lines do not bring (directly or
as a dependency), so a sample that works here only because the development install brought, say,
``itsdangerous`` fails as it would for a reader.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from helpers import scaled
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from test_code_samples import ROOT, SESSION, SHELL_LANGUAGES, Page, clean_environment, read_page, session_blocks

INTEGRATIONS = [ROOT / "docs" / "integrations" / f"{name}.md" for name in ("fastapi", "flask", "django")]
"""Pages a reader follows from their own install lines: those must install errands as install.md says."""
PAGES = INTEGRATIONS[:2]
"""...and whose samples run with what those lines install and nothing else (django.md's samples need
a Django project, which tests/django follows step by step)."""

PATH_OF_ERRANDS = re.compile(r"^(?:\.{0,2}/|file:|dist/)\S*errands[^/\s]*$")
"""errands as install.md installs it: a checkout's path, or a built wheel."""

HIDER = '''
import importlib.abc, importlib.metadata, json, runpy, sys
allowed = set(json.loads(sys.argv.pop(1)))
owners = importlib.metadata.packages_distributions()

class Hidden(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        top = name.partition(".")[0]
        dists = {d.lower().replace("_", "-").replace(".", "-") for d in owners.get(top, ())}
        if dists and not dists & allowed:
            raise ModuleNotFoundError(f"No module named {top!r} (not installed by the page's install lines: "
                                      f"{', '.join(sorted(dists))})", name=top)
        return None

sys.meta_path.insert(0, Hidden())
sys.argv = sys.argv[1:]  # _session.py BLOCKS.json
runpy.run_path(sys.argv[0], run_name="__main__")
'''


def install_requirements(page: Page) -> list[str]:
    """The requirement words of every ``pip install`` line of the page's shell blocks."""
    found = []
    for block in page.of(*SHELL_LANGUAGES):
        for line in block.code.splitlines():
            words = shlex.split(line, comments=True)
            if words[:2] == ["pip", "install"] or words[1:3] == ["-m", "pip"]:
                found += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return found


def _requirement(word: str) -> Requirement:
    if PATH_OF_ERRANDS.match(word):
        extras = re.search(r"\[([\w,\s-]*)\]$", word)
        return Requirement(f"errands[{extras.group(1)}]" if extras else "errands")
    return Requirement(word)


def installed_by(words: list[str]) -> set[str]:
    """The distributions ``pip install <words>`` installs: each with its dependencies, extras followed."""
    todo = [_requirement(w) for w in words]
    seen: set[tuple[str, frozenset[str]]] = set()
    names: set[str] = set()
    while todo:
        req = todo.pop()
        name = canonicalize_name(req.name)
        key = (name, frozenset(req.extras))
        if key in seen:
            continue
        seen.add(key)
        names.add(name)
        try:
            requires = metadata.requires(req.name) or []
        except metadata.PackageNotFoundError:
            continue
        for text in requires:
            dep = Requirement(text)
            if dep.marker is None or any(dep.marker.evaluate({"extra": e}) for e in (*req.extras, "")):
                todo.append(dep)
    return names


@pytest.mark.parametrize("path", INTEGRATIONS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_install_lines_name_errands_as_install_md_installs_it(path: Path) -> None:
    page = read_page(path)
    words = install_requirements(page)
    assert words, f"{page.name} has no pip install line"
    for word in words:
        if canonicalize_name(_requirement(word).name) == "errands":
            assert PATH_OF_ERRANDS.match(word), (
                f"{page.name}: `pip install {word}` finds nothing, errands is not on PyPI yet: install it from the "
                "checkout's path, './errands[...]', as docs/install.md says")
    assert "../install.md" in path.read_text(), f"{page.name} does not link docs/install.md"


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_the_samples_run_with_only_what_the_install_lines_install(path: Path, tmp_path: Path) -> None:
    page = read_page(path)
    words = install_requirements(page)
    allowed = installed_by(words) | {"pip", "setuptools"}
    work = tmp_path / "work"
    work.mkdir()
    (tmp_path / "blocks.json").write_text(json.dumps(session_blocks(page, {})))
    (tmp_path / "hider.py").write_text(HIDER)
    done = subprocess.run([sys.executable, str(tmp_path / "hider.py"), json.dumps(sorted(allowed)), str(SESSION),
                           str(tmp_path / "blocks.json")], cwd=work, env=clean_environment(), capture_output=True,
                          text=True, timeout=scaled(120))
    assert done.returncode == 0, (f"{page.name}'s samples need more than its install lines bring "
                                  f"({', '.join(words)}):\n{done.stderr[-4000:]}")


def test_the_hidden_venv_hides_what_the_lines_do_not_bring() -> None:
    """Guards the check itself: without itsdangerous on the line, the session login cannot import."""
    assert "itsdangerous" not in installed_by(["./errands[dashboard]", "fastapi"])
    assert {"errands", "starlette", "jinja2", "uvicorn", "fastapi", "itsdangerous"} <= installed_by(
        ["./errands[dashboard]", "fastapi", "itsdangerous"])
    assert "psycopg" not in installed_by(["./errands[dashboard]"])
