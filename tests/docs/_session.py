"""Runs one page's Python samples as one session, in the interpreter the docs test starts for it.

Usage: ``python _session.py BLOCKS.json`` with the current directory set to an empty scratch folder.
BLOCKS.json is a list of ``{"page", "line", "kind", "code", "path"}`` objects, in page order:

* ``kind == "file"``: ``code`` is written to ``path`` (relative to the current directory, which is on
  ``sys.path``), so later blocks can import it, as a reader's project would;
* ``kind == "append"``: ``code`` is added to the end of ``path`` (a file an earlier block or setup made);
* ``kind == "python"``: ``code`` runs in the one namespace all blocks share.  Top-level ``await``
  works, as in ``python -m asyncio``.  The code is compiled under the page's name with blank lines in
  front, so a traceback names the page and the line of the Markdown file.

Exit status 0 when every block ran; a failing block prints its traceback and exits 1.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import json
import linecache
import os
import sys
import traceback
import types
from pathlib import Path


def run(blocks: list[dict[str, object]]) -> int:
    sys.path.insert(0, os.getcwd())
    main = types.ModuleType("__main__")  # the samples' own __main__ (dataclasses, SQLAlchemy and Django look there)
    main.__dict__["__builtins__"] = __builtins__
    # A page's samples are a script, as a reader runs them (``python tasks.py``), not a REPL: errands
    # names their jobs after the script's module and refuses a job that only a REPL would define.
    main.__file__ = os.path.join(os.getcwd(), "tasks.py")
    sys.modules["__main__"] = main
    namespace = main.__dict__
    sources: dict[str, list[str]] = {}
    for block in blocks:
        code, page, line = str(block["code"]), str(block["page"]), int(str(block["line"]))
        if block["kind"] in ("file", "append"):
            target = Path(str(block["path"]))
            target.parent.mkdir(parents=True, exist_ok=True)
            if block["kind"] == "append":
                with target.open("a") as out:
                    out.write("\n" + code)
            else:
                target.write_text(code)
            continue
        print(f"--- {page}:{line}", file=sys.stderr, flush=True)
        remember(sources, page, line, code)
        try:
            compiled = compile("\n" * (line - 1) + code, page, "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
            if compiled.co_flags & inspect.CO_COROUTINE:
                asyncio.run(types.FunctionType(compiled, namespace)())
            else:
                exec(compiled, namespace)
        except BaseException:  # noqa: B036 - SystemExit from a sample is a failure too
            print(f"the sample at {page}:{line} failed:", file=sys.stderr)
            traceback.print_exc()
            return 1
    return 0


def remember(sources: dict[str, list[str]], page: str, line: int, code: str) -> None:
    """Let tracebacks quote the page's lines (the page path is relative to the repository, not to cwd)."""
    lines = sources.setdefault(page, [])
    new = code.splitlines(keepends=True)
    lines.extend(["\n"] * max(0, line - 1 + len(new) - len(lines)))
    lines[line - 1:line - 1 + len(new)] = new
    linecache.cache[page] = (sum(map(len, lines)), None, lines, page)


if __name__ == "__main__":
    sys.exit(run(json.loads(Path(sys.argv[1]).read_text())))
