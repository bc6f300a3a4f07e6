"""Every code sample in README.md and docs/ is run or parsed here, so the docs cannot drift from the code.

One test per page (the page's path is the test id).  What a page's blocks must satisfy:

* ```python blocks run in page order as one session in a fresh interpreter (``_session.py``): the
  current directory is an empty scratch folder, the environment has no ``ERRANDS_*`` variable and no
  ``DATABASE_URL``, and a block sees the names earlier blocks defined, as in a doctest session.
  Top-level ``await`` works.  A traceback names the page and the line in the Markdown file.
* A python block whose first line is a comment naming a file, e.g. ``# myproject/tasks.py``, is a
  module of the reader's project: it is written to that path in the scratch folder (which is on
  ``sys.path``) instead of being run, and later blocks import it (``from myproject.tasks import app``).
  ``# myproject/settings.py (append)`` adds the block to the end of that file (one a setup made,
  such as ``django-admin startproject``) instead.
* ``<!-- docs-test setup: ... -->`` right before a python block is code the reader need not see (a
  stand-in for a third-party service); it runs just before that block.  Use it rarely: a sample
  should be complete as shown.
* Database URLs in python blocks are the ones a reader would write.  ``sqlite:///...`` runs as it is.
  The server URLs in ``SERVER_URLS`` (e.g. ``postgresql://app@db/shop``) are rewritten in the source:
  a page that names one runs twice, once against fresh databases on the test servers (skipped when
  a server is down outside CI, like the other server tests) and once with every server URL rewritten
  to ``sqlite:///errands.db``.  ``<!-- docs-test: servers only -->`` anywhere on a page drops the
  SQLite run, for samples that use a server's own driver.  Any other server URL in a python block fails
  the test: add it to the table or use one that is there.
* Every ``errands ...`` command line in sh / console / shell / bash / ini / dockerfile / yaml /
  crontab blocks (after a ``$`` prompt, ``VAR=value`` assignments, a path such as
  ``/srv/shop/.venv/bin/errands``, or ``python -m``; up to a pipe, ``&&``, ``;`` or a comment) is
  parsed by the real click command: the command path, each option and each option's value type must
  exist.  Nothing is run.
* ```toml blocks that contain ``[tool.errands`` must be read by ``errands.core.settings.cli_default_map``
  without error.
* ```text, ```json, ```sql and unlabelled blocks are output, synopses or illustrations: not checked.
"""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import click
import pytest
from helpers import scaled
from markdown_it import MarkdownIt

from errands.cli import main
from errands.core.settings import cli_default_map

ROOT = Path(__file__).resolve().parents[2]
SESSION = Path(__file__).with_name("_session.py")

SERVER_URLS = {
    "postgresql://app@db/shop": "postgres",
    "postgresql://app@db/app": "postgres",
    "postgresql+psycopg://app@db/shop": "postgres",
    "mysql://app:secret@db/shop": "mysql",
}
"""The server URLs samples may use, and which test server stands in for each."""

SERVER_URL_PATTERN = re.compile(r"\b(?:postgres(?:ql)?|mysql|mariadb)(?:\+\w+)?://[^\s\"'`)]*")
SHELL_LANGUAGES = {"sh", "shell", "bash", "console", "ini", "systemd", "dockerfile", "yaml", "crontab", "cron"}
FILE_COMMENT = re.compile(r"#\s*([\w./-]+\.py)(\s+\(append\))?\s*$")
SETUP_COMMENT = re.compile(r"<!--\s*docs-test setup:\s*\n?(.*?)-->", re.S)
SERVERS_ONLY = "<!-- docs-test: servers only -->"
SHELL_OPERATORS = {"|", "||", "&&", ";", "&", ">", ">>", "<", "2>", "(", ")"}


@dataclass
class Block:
    page: str
    line: int
    """1-based line of the block's first code line in the Markdown file."""
    language: str
    code: str
    setup: str | None = None


@dataclass
class Page:
    path: Path
    blocks: list[Block] = field(default_factory=list)
    servers_only: bool = False

    @property
    def name(self) -> str:
        return self.path.relative_to(ROOT).as_posix()

    def of(self, *languages: str) -> list[Block]:
        return [b for b in self.blocks if b.language in languages]

    def servers(self) -> set[str]:
        """Which test servers the page's python blocks need."""
        return {SERVER_URLS[url] for b in self.of("python") for url in server_urls_in(b.code) if url in SERVER_URLS}


def server_urls_in(code: str) -> set[str]:
    """Server URLs in the string literals of ``code`` (a URL in a comment is prose)."""
    try:
        kinds = {tokenize.STRING, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}  # f-strings from 3.12
        strings = [t.string for t in tokenize.generate_tokens(io.StringIO(code).readline) if t.type in kinds]
    except (tokenize.TokenError, SyntaxError):
        strings = [code]
    return {url for text in strings for url in SERVER_URL_PATTERN.findall(text)}


def read_page(path: Path) -> Page:
    text = path.read_text()
    page = Page(path, servers_only=SERVERS_ONLY in text)
    setup: str | None = None
    for token in MarkdownIt("commonmark").parse(text):
        if token.type == "html_block":
            match = SETUP_COMMENT.search(token.content)
            setup = match.group(1) if match else None
            continue
        if token.type == "fence" and token.map is not None:
            language = token.info.split()[0].lower() if token.info.strip() else ""
            page.blocks.append(Block(page.name, token.map[0] + 2, language, token.content, setup))
        setup = None
    return page


def all_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def checked(path: Path) -> bool:
    page = read_page(path)
    return any(b.language in {"python", "toml", *SHELL_LANGUAGES} for b in page.blocks)


def page_params() -> Iterator[object]:
    for path in all_pages():
        if not checked(path):
            continue
        page = read_page(path)
        name = page.name
        if not page.servers():
            yield pytest.param(path, "sqlite", id=name)
            continue
        if not page.servers_only:
            yield pytest.param(path, "sqlite", id=f"{name}[sqlite]")
        yield pytest.param(path, "servers", id=f"{name}[servers]")


# ---------------------------------------------------------------------------------------------- python
def session_blocks(page: Page, urls: dict[str, str]) -> list[dict[str, object]]:
    """The blocks ``_session.py`` runs, with server URLs rewritten."""
    def rewritten(code: str, block: Block) -> str:
        for found in server_urls_in(code):
            if found not in SERVER_URLS:
                pytest.fail(f"{block.page}:{block.line}: the server URL {found!r} is not one the docs test knows; "
                            f"use one of {', '.join(SERVER_URLS)} (tests/docs/test_code_samples.py)", pytrace=False)
        for doc_url, real in sorted(urls.items(), key=lambda item: -len(item[0])):
            code = code.replace(doc_url, real)
        return code

    out: list[dict[str, object]] = []
    for block in page.of("python"):
        code = rewritten(block.code, block)
        if block.setup is not None:
            out.append({"page": block.page, "line": block.line, "kind": "python",
                        "code": rewritten(block.setup, block), "path": None})
        first = code.split("\n", 1)[0]
        file_match = FILE_COMMENT.fullmatch(first.strip())
        if file_match:
            out.append({"page": block.page, "line": block.line, "kind": "append" if file_match.group(2) else "file",
                        "code": code, "path": file_match.group(1)})
        else:
            out.append({"page": block.page, "line": block.line, "kind": "python", "code": code, "path": None})
    return out


def clean_environment() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ERRANDS_") and k != "DATABASE_URL"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return env


def server_urls(page: Page, variant: str, servers: dict[str, object], made: list[tuple[object, str]]
                ) -> dict[str, str]:
    """Doc URL -> the URL the sample really uses in this run (a fresh database per server kind)."""
    if variant == "sqlite":
        return {url: "sqlite:///errands.db" for url in SERVER_URLS}
    fresh: dict[str, str] = {}
    for kind in sorted(page.servers()):
        server = servers[kind]
        url, handle = server.new_url()  # type: ignore[attr-defined]
        made.append((server, handle))
        fresh[kind] = url
    return {doc: doc.split("://")[0] + "://" + fresh[kind].split("://", 1)[1]
            for doc, kind in SERVER_URLS.items() if kind in fresh}


def run_python(page: Page, urls: dict[str, str], scratch: Path) -> None:
    blocks = session_blocks(page, urls)
    if not blocks:
        return
    work = scratch / "work"
    work.mkdir()
    (scratch / "blocks.json").write_text(json.dumps(blocks))
    done = subprocess.run([sys.executable, str(SESSION), str(scratch / "blocks.json")], cwd=work,
                          env=clean_environment(), capture_output=True, text=True, timeout=scaled(120))
    if done.returncode != 0:
        pytest.fail(f"python samples of {page.name} failed (exit {done.returncode}):\n{done.stderr[-6000:]}"
                    f"\n--- stdout:\n{done.stdout[-2000:]}", pytrace=False)


# ---------------------------------------------------------------------------------------------- CLI
def command_lines(block: Block) -> Iterator[str]:
    """Logical lines (backslash continuations joined) of a shell-like block."""
    pending = ""
    for raw in block.code.splitlines():
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        yield pending + raw
        pending = ""
    if pending:
        yield pending


COMMAND_PREFIXES = {"sudo", "exec", "nohup", "env", "time", "python", "python3", "-m"}
"""Words after which the next one is still the program (``python -m errands`` runs errands)."""
CRON_FIELD = re.compile(r"[\d*/,-]+")
"""A crontab schedule field: the command comes after five of them."""


def errands_invocations(line: str) -> Iterator[list[str]]:
    """The argument lists of each ``errands`` command on a line."""
    exec_form = re.match(r"\s*(?:CMD|ENTRYPOINT|RUN)\s+(\[.*\])\s*$", line)
    if exec_form:  # a Dockerfile's JSON array
        words = json.loads(exec_form.group(1))
        if words and words[0].rsplit("/", 1)[-1] == "errands":
            yield words[1:]
        return
    lexer = shlex.shlex(line.replace("$ ", "", 1) if line.lstrip().startswith("$ ") else line,
                        posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        tokens = list(lexer)
    except ValueError:  # an unbalanced quote: not a shell line (e.g. YAML prose)
        return
    i, command_start = 0, True  # only a word in command position runs a program ("pip install errands" does not)
    while i < len(tokens):
        token = tokens[i]
        key, _, program = token.rpartition("=")  # systemd's ExecStart=..., supervisor's command=...
        if command_start and program.rsplit("/", 1)[-1] == "errands" and key in ("", "ExecStart", "ExecStartPre",
                                                                                  "command"):
            args = []
            i += 1
            while i < len(tokens) and tokens[i] not in SHELL_OPERATORS:
                args.append(tokens[i])
                i += 1
            yield args
            continue
        if token in SHELL_OPERATORS:
            command_start = True
        elif command_start and not (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", token) or token in COMMAND_PREFIXES
                                    or CRON_FIELD.fullmatch(token)):
            command_start = False  # an environment assignment or a wrapper keeps the command position
        i += 1


def check_cli(args: list[str]) -> None:
    """Parse ``args`` as click would for ``errands``: commands, options and option values must exist."""
    command: click.Command = main
    name, parent, rest = "errands", None, list(args)
    while True:
        extra = {"default_map": {}} if parent is None else {}
        try:
            ctx = command.make_context(name, list(rest), parent=parent, **extra)  # type: ignore[arg-type]
        except click.exceptions.Exit:  # --help, --version
            return
        if not isinstance(command, click.Group):
            return
        _, rest, _ = command.make_parser(ctx).parse_args(list(rest))
        if not rest:
            return
        sub = command.get_command(ctx, rest[0])
        if sub is None:
            raise click.UsageError(f"no such command {rest[0]!r} under {ctx.command_path!r}")
        name, parent, command, rest = rest[0], ctx, sub, rest[1:]


def check_commands(page: Page) -> int:
    count = 0
    for block in page.of(*SHELL_LANGUAGES):
        for line in command_lines(block):
            for args in errands_invocations(line):
                count += 1
                try:
                    check_cli(args)
                except click.ClickException as exc:
                    pytest.fail(f"{block.page}:{block.line}: `errands {shlex.join(args)}` does not parse: "
                                f"{exc.format_message()}", pytrace=False)
    return count


def check_toml(page: Page, scratch: Path) -> None:
    for n, block in enumerate(page.of("toml")):
        if "[tool.errands" not in block.code:
            continue
        path = scratch / f"toml-{n}" / "pyproject.toml"
        path.parent.mkdir()
        path.write_text(block.code)
        try:
            cli_default_map(path, main.commands)
        except Exception as exc:
            pytest.fail(f"{block.page}:{block.line}: [tool.errands] is refused: {exc}", pytrace=False)


# ---------------------------------------------------------------------------------------------- tests
@pytest.mark.parametrize(("path", "variant"), list(page_params()))
def test_page_samples(path: Path, variant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                      request: pytest.FixtureRequest) -> None:
    for key in list(os.environ):
        if key.startswith("ERRANDS_") or key == "DATABASE_URL":
            monkeypatch.delenv(key)
    page = read_page(path)
    check_toml(page, tmp_path)
    check_commands(page)
    made: list[tuple[object, str]] = []
    servers = request.getfixturevalue("_servers") if variant == "servers" else {}
    try:
        run_python(page, server_urls(page, variant, servers, made), tmp_path)
    finally:
        for server, handle in made:
            server.drop(handle)  # type: ignore[attr-defined]


def test_the_collection_sees_every_kind_of_sample() -> None:
    """Guards the collector itself: a parser change that found nothing would pass every page."""
    pages = [read_page(p) for p in all_pages()]
    python = sum(len(p.of("python")) for p in pages)
    commands = sum(1 for p in pages for b in p.of(*SHELL_LANGUAGES) for line in command_lines(b)
                   for _ in errands_invocations(line))
    assert python >= 50 and commands >= 40, (python, commands)
    assert any(p.of("toml") for p in pages)


def test_the_cli_check_refuses_what_does_not_exist() -> None:
    check_cli(["--app", "shop.tasks:app", "worker", "-c", "8", "--max", "100", "--burst"])
    check_cli(["failed", "retry", "--all", "--queue", "mails"])
    check_cli(["worker", "--help"])
    for wrong in (["wroker"], ["worker", "--concurency", "8"], ["worker", "-c", "many"], ["failed", "undo"],
                  ["status", "extra"]):
        with pytest.raises(click.ClickException):
            check_cli(wrong)


def test_command_lines_are_found_where_deployments_write_them() -> None:
    block = Block("x.md", 1, "ini", "ExecStart=/srv/shop/.venv/bin/errands --app shop.tasks:app worker -c 8\n"
                                    "$ ERRANDS_QUEUES=mails errands status --json | jq .queues  # counts\n"
                                    "* * * * * cd /srv/shop && errands worker --burst --max 500 >> log 2>&1\n"
                                    "python -m errands migrate --sql\n"
                                    "pip install errands 'errands[dashboard]'  # not a command line of errands\n"
                                    "*/5 * * * * errands recover\n"
                                    'CMD ["errands", "--app", "shop.tasks:app", "worker"]\n')
    found = [args for line in command_lines(block) for args in errands_invocations(line)]
    assert found == [["--app", "shop.tasks:app", "worker", "-c", "8"], ["status", "--json"],
                     ["worker", "--burst", "--max", "500"], ["migrate", "--sql"], ["recover"],
                     ["--app", "shop.tasks:app", "worker"]]
