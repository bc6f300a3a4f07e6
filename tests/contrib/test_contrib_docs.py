"""Every ```python block of the FastAPI and Flask integration pages runs as written, in a fresh
interpreter (each is a complete program on a SQLite file in a temporary directory)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from contrib_helpers import ROOT
from helpers import scaled

PAGES = [ROOT / "docs" / "integrations" / "fastapi.md", ROOT / "docs" / "integrations" / "flask.md"]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.M | re.S)


def blocks() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for n, match in enumerate(BLOCK.finditer(page.read_text()), 1):
            found.append((f"{page.stem}-{n}", match.group(1)))
    return found


def test_each_page_has_samples() -> None:
    names = [name for name, _ in blocks()]
    assert sum(n.startswith("fastapi-") for n in names) >= 3 and sum(n.startswith("flask-") for n in names) >= 3


@pytest.mark.parametrize(("name", "code"), blocks(), ids=[name for name, _ in blocks()])
def test_doc_sample_runs(name: str, code: str, tmp_path: Path) -> None:
    script = tmp_path / f"{name}.py"
    script.write_text(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")]),
               PYTHONWARNINGS="error::ResourceWarning")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=scaled(120))
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
