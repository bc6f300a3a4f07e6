"""``make docs`` stays green: the site builds with mkdocs in strict mode, so a broken link, a missing
anchor or a page left out of the nav fails the suite, not only the docs build."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import scaled

pytest.importorskip("mkdocs", reason="mkdocs comes with the docs extra (part of dev)")
import yaml  # noqa: E402 - PyYAML comes with mkdocs

ROOT = Path(__file__).resolve().parents[2]


def test_the_site_builds_without_a_warning(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=scaled(120))
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, "\n".join(warnings) or done.stderr[-3000:]
    site = tmp_path / "site"
    for page in ("index.html", "getting-started.html", "deployment.html", "migrating.html", "faq.html"):
        assert (site / page).is_file(), page
    # Nothing from the network when the site is read: no CDN scripts or fonts.
    html = (site / "getting-started.html").read_text()
    assert "cdnjs" not in html and "fonts.googleapis" not in html


def test_every_page_is_in_the_nav_once() -> None:
    """mkdocs warns about pages left out of the nav, but not about a page listed twice."""
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.SafeLoader)

    def files(entries: list) -> list[str]:
        out: list[str] = []
        for entry in entries:
            for value in entry.values() if isinstance(entry, dict) else [entry]:
                out.extend(files(value) if isinstance(value, list) else [value])
        return out

    listed = files(config["nav"])
    assert len(listed) == len(set(listed)), sorted(p for p in listed if listed.count(p) > 1)
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert set(listed) == pages
