"""A scenario's stateful tools over a real workspace: files, git, pytest and a shell in an
inspect_ai sandbox; a database in sqlite3; web pages as data.

A scenario's ``sandbox`` mapping (the spec) seeds the state; the tools change it; at the end
of a trial :meth:`Workspace.snapshot` reads what it ended as (a :class:`State`), which the
``state_*`` checks and the comparison with the oracle's state grade.

Spec keys, all optional:

- ``kind``: a label for people ("repo", "db", "web", …); it changes nothing;
- ``files``: {path: text}: the workspace, which is also the first commit of its git history
  (fixed author, committer and dates, so the same play gives the same SHAs on every run);
  paths are relative ("src/app.py"); the tools show them under ``cwd``;
- ``cwd``: the directory the tools show as the workspace root (default ``/workspace``);
- ``tests``: {path: text}: the hidden tests: real pytest files, kept out of the workspace and
  run on the final files when the trial is graded (``state_tests_pass``), so a fix passes
  when the code does what the tests assert, whatever its text, and an edit of the visible
  test files changes nothing;
- ``db``: {table: [row, ...]}: rows are flat mappings; ``db_query`` / ``db_execute`` run
  the SQL in sqlite3 (an in-memory database per trial);
- ``pages``: {url: text | {title, text}}: what ``web_fetch`` returns and ``web_search``
  searches (URLs match without scheme, ``www.`` or a trailing slash);
- ``fail_once``: [tool, ...]: each of these answers its first call with
  ``error: temporarily unavailable (503), retry`` (and does nothing), then works.

``bash_exec`` runs the command in a real ``bash`` in the workspace (pipes, heredocs, ``sed -i``,
``python -c``, git, pytest), with a clean environment (no variable of the user's), plugin
autoload of pytest off, and, on the local provider, in a network namespace of its own when
``unshare`` can make one. A destructive command (rm, dd, mkfs, ``git reset --hard``,
``curl … | sh``, …) never reaches the sandbox: it is recorded in ``refused`` and answered
with an error.

Every tool answers ``(result, kind)``; kind is "error" for a failure (a bad argument, a
missing file, a refused command, an injected 503), which the model can recover from.
"""

from __future__ import annotations

import copy
import json
import os
import posixpath
import re
import shlex
import shutil
import sqlite3
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from pydantic import AliasChoices, BeforeValidator, Field

from .._errors import SplitserveError
from .._node import run_command
from ._catalog import ToolError, Toolset
from ._checks import register
from ._trace import CheckResult, ResultKind, Trace

ROOT = "/workspace"
UNAVAILABLE = "error: temporarily unavailable (503), retry"
SPEC_KEYS = frozenset({"kind", "files", "cwd", "tests", "db", "pages", "fail_once"})
SANDBOX_KINDS = ("local", "docker")
GIT_DATE = "2025-01-01T00:00:00+00:00"
GIT_ENV = {
    "GIT_AUTHOR_NAME": "splitserve eval",
    "GIT_AUTHOR_EMAIL": "eval@splitserve.invalid",
    "GIT_COMMITTER_NAME": "splitserve eval",
    "GIT_COMMITTER_EMAIL": "eval@splitserve.invalid",
    "GIT_AUTHOR_DATE": GIT_DATE,
    "GIT_COMMITTER_DATE": GIT_DATE,
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_TERMINAL_PROMPT": "0",
}
EXEC_TIMEOUT_S = 60
MAX_OUTPUT = 20_000
_SKIP_PARTS = frozenset({".git", "__pycache__", ".pytest_cache"})
PYTEST = ["python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "--color=no"]


# the workspace's tools: the methods of Workspace marked @SANDBOX.tool (their schemas: ``_catalog``)
SANDBOX = Toolset("sandbox")


def _listed(value: Any) -> Any:
    """One path given as a string stands for a list of it."""
    return [value] if isinstance(value, str) else value


_DESTRUCTIVE = re.compile(
    r"(?:^|[\s;&|(`])(?:sudo\s+)?"
    r"(?:rm|rmdir|shred|unlink|mkfs(?:\.\w+)?|dd|truncate|wipefs|fdisk)(?:\s|$)"
    r"|\bgit\s+(?:reset\s+--hard|clean\b|push\b[^|;&]*(?:\s-f\b|--force)"
    r"|branch\s+-D\b|checkout\s+--\s)"
    r"|\b(?:curl|wget)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"
    r"|:\(\)\s*\{|\bchmod\s+-R\b|\bdrop\s+(?:table|database)\b",
    re.I,
)


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(x, str) for x in items):
        raise ValueError(f"{what} must be a string or a list of strings, got {value!r}")
    return tuple(items)


def _text_map(value: Any, what: str) -> dict[str, str]:
    value = value or {}
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"sandbox {what} must map paths to text")
    for path in value:
        norm = posixpath.normpath(path)
        if path.startswith("/") or norm == ".." or norm.startswith("../"):
            raise ValueError(f"sandbox {what}: {path!r} is not a relative path inside the workspace")
    return dict(value)


def _url_key(url: str) -> str:
    key = re.sub(r"^[a-z]+://", "", url.strip(), flags=re.I)
    key = re.sub(r"^www\.", "", key, flags=re.I)
    host, _, rest = key.partition("/")
    return (host.lower() + ("/" + rest if rest else "")).rstrip("/")


def check_spec(spec: Any) -> dict[str, Any]:
    """The spec, checked; ValueError naming what is wrong."""
    if not isinstance(spec, dict):
        raise ValueError(f"a sandbox spec is a mapping, got {type(spec).__name__}")
    unknown = set(spec) - SPEC_KEYS
    if unknown:
        raise ValueError(f"unknown sandbox keys {sorted(unknown)} (known: {', '.join(sorted(SPEC_KEYS))})")
    _text_map(spec.get("files"), "files")
    _text_map(spec.get("tests"), "tests")
    db = spec.get("db") or {}
    if not isinstance(db, dict) or not all(
        isinstance(r, list) and all(isinstance(x, dict) for x in r) for r in db.values()
    ):
        raise ValueError("sandbox db must map table names to lists of rows (mappings)")
    for table in db:
        if not re.fullmatch(r"[A-Za-z_]\w*", str(table)):
            raise ValueError(f"sandbox db: {table!r} is not a table name")
    unknown_tools = set(_strings(spec.get("fail_once"), "fail_once")) - set(SANDBOX)
    if unknown_tools:
        raise ValueError(f"fail_once names tools the sandbox does not have: {sorted(unknown_tools)}")
    return spec


# --- the database: sqlite3 ---


def _sql_type(values: list[Any]) -> str:
    kinds = {type(v) for v in values if v is not None}
    if kinds <= {int, bool}:
        return "INTEGER"
    if kinds <= {int, float, bool}:
        return "REAL"
    return "TEXT"


class Database:
    """The spec's tables in an in-memory sqlite3 database."""

    def __init__(self, tables: dict[str, list[dict[str, Any]]]) -> None:
        self.conn = sqlite3.connect(":memory:", check_same_thread=False)
        self.conn.row_factory = sqlite3.Row
        self.columns: dict[str, list[str]] = {}
        for table, rows in tables.items():
            cols = list(dict.fromkeys(k for r in rows for k in r))
            self.columns[table] = cols
            decl = ", ".join(f'"{c}" {_sql_type([r.get(c) for r in rows])}' for c in cols) or "id INTEGER"
            self.conn.execute(f'CREATE TABLE "{table}" ({decl})')
            if cols:
                marks = ", ".join("?" for _ in cols)
                self.conn.executemany(
                    f'INSERT INTO "{table}" VALUES ({marks})', [[_cell(r.get(c)) for c in cols] for r in rows]
                )
        self.conn.commit()

    def query(self, sql: str) -> list[dict[str, Any]]:
        self.conn.execute("PRAGMA query_only = ON")
        try:
            return [dict(r) for r in self.conn.execute(sql).fetchall()]
        except sqlite3.Error as exc:
            raise ToolError(_sql_error(exc)) from None
        finally:
            self.conn.execute("PRAGMA query_only = OFF")

    def execute(self, sql: str) -> int:
        if re.match(r"\s*(SELECT|WITH|PRAGMA)\b", sql, re.I):
            raise ToolError("db_execute changes data; use db_query for SELECT")
        before = self.conn.total_changes
        try:
            self.conn.executescript(sql)
        except sqlite3.Error as exc:
            self.conn.rollback()
            raise ToolError(_sql_error(exc)) from None
        return self.conn.total_changes - before

    def dump(self) -> dict[str, list[dict[str, Any]]]:
        names = [r[0] for r in self.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")]
        return {t: [dict(r) for r in self.conn.execute(f'SELECT * FROM "{t}" ORDER BY rowid')] for t in names}


def _cell(value: Any) -> Any:
    return value if value is None or isinstance(value, (int, float, str)) else json.dumps(value)


def _sql_error(exc: sqlite3.Error) -> str:
    text = str(exc)
    if "readonly" in text or "read-only" in text:
        return "db_query is read-only; use db_execute to change data"
    return f"sqlite3: {text}"


# --- sandbox environments ---


def docker_problem() -> str | None:
    """Why ``--sandbox docker`` cannot run here, or None."""
    if shutil.which("docker") is None:
        return "--sandbox docker: the docker CLI is not installed; use --sandbox local"
    try:
        done = run_command(["docker", "info", "--format", "{{.ServerVersion}}"], timeout=20)
    except SplitserveError as exc:  # it did not answer in time
        return f"--sandbox docker: docker info failed ({exc}); use --sandbox local"
    if done.returncode != 0 or not done.stdout.strip():
        why = (done.stderr or done.stdout).strip().splitlines()
        return f"--sandbox docker: no Docker engine is running ({why[-1] if why else 'docker info failed'}); use --sandbox local"
    return None


def sandbox_spec(kind: str) -> Any:
    """inspect_ai's SandboxEnvironmentSpec for ``kind`` (docker: our compose file, no network)."""
    from inspect_ai.util import SandboxEnvironmentSpec

    if kind == "local":
        return SandboxEnvironmentSpec("local")
    if kind == "docker":
        return SandboxEnvironmentSpec("docker", str(Path(__file__).parent / "sandbox" / "compose.yaml"))
    raise ValueError(f"--sandbox {kind}: unknown (choose from {', '.join(SANDBOX_KINDS)})")


@asynccontextmanager
async def open_sandbox(kind: str = "local") -> AsyncIterator[Any]:
    """A fresh inspect_ai sandbox environment outside an eval sample (the oracle's replay, tests)."""
    from inspect_ai.util._sandbox.registry import registry_find_sandboxenv

    spec = sandbox_spec(kind)
    env_type: Any = registry_find_sandboxenv(spec.type)
    await env_type.task_init("splitserve-eval", spec.config)
    envs = await env_type.sample_init("splitserve-eval", spec.config, {})
    try:
        yield envs["default"]
    finally:
        await env_type.sample_cleanup("splitserve-eval", spec.config, envs, False)
        await env_type.task_cleanup("splitserve-eval", spec.config, True)


def _is_local(env: Any) -> bool:
    """Whether ``env`` is inspect_ai's local provider (directly or behind its event proxy)."""
    from inspect_ai.util._sandbox.local import LocalSandboxEnvironment

    try:
        env.as_type(LocalSandboxEnvironment)
    except (TypeError, AttributeError):
        return False
    return True


_UNSHARE: list[bool] = []


def _can_unshare() -> bool:
    """Whether ``unshare -rn`` gives a command a network namespace of its own here."""
    if not _UNSHARE:
        ok = shutil.which("unshare") is not None
        if ok:
            try:
                ok = run_command(["unshare", "-rn", "true"], timeout=10).returncode == 0
            except SplitserveError:
                ok = False
        _UNSHARE.append(ok)
    return _UNSHARE[0]


# --- the final state ---


@dataclass
class State:
    """What a trial (or the oracle's play) left: files, git history, hidden-test verdict, tables."""

    files: dict[str, str] = field(default_factory=dict)
    initial_files: dict[str, str] = field(default_factory=dict)
    commits: list[tuple[str, str]] = field(default_factory=list)  # (sha, subject) after the first, oldest first
    initial_sha: str = ""
    head: str = ""
    clean: bool = True
    tests: dict[str, str] = field(default_factory=dict)  # the hidden tests
    tests_passed: bool | None = None
    tests_report: str = ""
    db: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    initial_db: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    mutations: list[str] = field(default_factory=list)
    diff: str = ""  # every file change since the first commit, committed or not (git diff)

    def compare(self, reference: State) -> tuple[bool, str]:
        """Whether this state is the reference's (the oracle's), tau2-bench's way: any path to
        the same end passes. Tables compare row for row; files line for line (trailing spaces
        and blank lines aside) except sources the hidden tests judge, which pass by the tests;
        git by whether a commit was made and the tree left clean."""
        if self.db != reference.db:
            for table in sorted(set(self.db) | set(reference.db)):
                got, want = self.db.get(table, []), reference.db.get(table, [])
                if got != want:
                    diff = [r for r in got if r not in want][:1] or [r for r in want if r not in got][:1]
                    return (
                        False,
                        f"table {table} differs from the oracle's ({len(got)} rows vs {len(want)}; e.g. {diff})",
                    )
        # with hidden tests, Python sources are judged by the tests, whatever their text
        judged = {p for p in set(self.files) | set(reference.files) if p.endswith(".py") and p not in self.tests}
        mine = {p: _norm(t) for p, t in self.files.items() if p not in judged}
        theirs = {p: _norm(t) for p, t in reference.files.items() if p not in judged}
        for path in sorted(set(mine) | set(theirs)):
            if mine.get(path) != theirs.get(path):
                what = "missing" if path not in mine else "extra" if path not in theirs else "different"
                return False, f"file {path} is {what} compared with the oracle's end state"
        if self.tests_passed != reference.tests_passed:
            verb = {True: "pass", False: "fail", None: "are absent"}
            return False, (
                f"the hidden tests {verb[self.tests_passed]}; after the oracle's play they "
                f"{verb[reference.tests_passed]}"
            )
        if bool(self.commits) != bool(reference.commits):
            return False, "a commit was made, the oracle makes none" if self.commits else "no commit was made"
        if self.clean != reference.clean:
            return False, "uncommitted changes are left" if not self.clean else "the oracle leaves changes uncommitted"
        return True, "the final state is the oracle's"


def _norm(text: str) -> str:
    return "\n".join(line.rstrip() for line in text.splitlines()).rstrip("\n")


# --- the workspace ---


class Workspace:
    """The tools of one trial over one spec's state, in an inspect_ai sandbox environment."""

    def __init__(self, env: Any, spec: dict[str, Any], base: str, python_dir: str, isolate: bool) -> None:
        self.env = env
        self.spec = spec
        self.shown = str(spec.get("cwd") or ROOT).rstrip("/") or ROOT
        self.base = base
        self.root = f"{base}/workspace"
        self.home = f"{base}/home"
        self.initial_files = _text_map(spec.get("files"), "files")
        self.tests = _text_map(spec.get("tests"), "tests")
        tables = spec.get("db") or {}
        self.db = Database(tables) if tables else None
        self.initial_db = self.db.dump() if self.db else {}
        self.pages: dict[str, tuple[str, str, str]] = {}
        for url, page in (spec.get("pages") or {}).items():
            title, text = (page.get("title", url), page.get("text", "")) if isinstance(page, dict) else (url, page)
            self.pages[_url_key(url)] = (url, str(title), str(text))
        self.fail_once = set(_strings(spec.get("fail_once"), "fail_once"))
        self.failed: set[str] = set()
        self.refused: list[str] = []
        self.mutations: list[str] = []
        self.initial_sha = ""
        self._prefix = ["unshare", "-rn"] if isolate else []
        self._env = {
            "PATH": f"{python_dir}:/usr/local/bin:/usr/bin:/bin",
            "HOME": self.home,
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": "0",
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            "PYTEST_ADDOPTS": "-p no:cacheprovider",
            **GIT_ENV,
        }

    @classmethod
    async def create(cls, env: Any, spec: dict[str, Any]) -> Workspace:
        """Seed a fresh environment with the spec: files, the first commit, the database."""
        check_spec(spec)
        pwd = await env.exec(["pwd"])
        base = pwd.stdout.strip().rstrip("/") or ""
        local = _is_local(env)
        python_dir = os.path.dirname(sys.executable) if local else "/usr/local/bin"
        ws = cls(env, spec, base, python_dir, isolate=local and _can_unshare())
        for path, text in ws.initial_files.items():
            await env.write_file(f"{ws.root}/{path}", text)
        await env.write_file(f"{ws.home}/.keep", "")
        setup = (
            "git init -q -b main . && printf '__pycache__/\\n.pytest_cache/\\n' > .git/info/exclude"
            " && git add -A && git commit -q --allow-empty -m 'initial commit' && git rev-parse HEAD"
        )
        done = await ws._exec(["bash", "--noprofile", "--norc", "-c", setup], raw=True, mkdir=True)
        if not done.success:
            raise RuntimeError(f"sandbox setup failed: {done.stderr.strip()[:300]}")
        ws.initial_sha = done.stdout.strip().splitlines()[-1]
        return ws

    def handles(self, name: str) -> bool:
        return name in SANDBOX

    async def call(self, name: str, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        """Run tool ``name`` with the model's arguments, validated against its signature; a bad
        argument or a failure is an ``("error: ...", "error")`` answer."""
        if name not in SANDBOX:
            return f"error: the sandbox has no tool {name!r}", "error"
        if name in self.fail_once and name not in self.failed:
            self.failed.add(name)
            return UNAVAILABLE, "error"
        try:
            result: tuple[Any, ResultKind] = await SANDBOX.call(name, args if isinstance(args, dict) else {}, self)
            return result
        except ToolError as exc:
            return f"error: {exc}", "error"

    # --- running commands ---

    async def _exec(
        self, argv: list[str], cwd: str | None = None, raw: bool = False, mkdir: bool = False, input: str | None = None
    ) -> Any:
        """Run ``argv`` in the workspace with the clean environment (``env -i``)."""
        env_args = [f"{k}={v}" for k, v in self._env.items()]
        cmd = [*self._prefix, "env", "-i", *env_args, *argv]
        if mkdir:
            cmd = [
                "bash",
                "-c",
                f'mkdir -p {shlex.quote(self.root)} && cd {shlex.quote(self.root)} && exec "$@"',
                "-",
                *cmd,
            ]
        try:
            where = (self.base or "/") if mkdir else (cwd or self.root)
            return await self.env.exec(cmd, cwd=where, timeout=EXEC_TIMEOUT_S, input=input)
        except TimeoutError:
            if raw:
                raise
            raise ToolError(f"the command did not finish within {EXEC_TIMEOUT_S} s and was stopped") from None

    def _shown(self, text: str) -> str:
        """Output as the model sees it: the real workspace path shown as ``cwd``."""
        text = text.replace(self.root, self.shown)
        return (
            text if len(text) <= MAX_OUTPUT else text[:MAX_OUTPUT] + f"\n… ({len(text) - MAX_OUTPUT} more characters)"
        )

    async def _run(self, argv: list[str]) -> tuple[int, str, str]:
        done = await self._exec(argv)
        return done.returncode, self._shown(done.stdout), self._shown(done.stderr)

    # --- paths and arguments ---

    def _rel(self, raw: Any) -> str:
        """A workspace-relative path ("" is the root); ToolError outside the workspace."""
        text = str(raw).strip()
        if text == self.shown or text.startswith(self.shown + "/"):
            text = text[len(self.shown) :].lstrip("/")
        elif text == self.root or text.startswith(self.root + "/"):
            text = text[len(self.root) :].lstrip("/")
        elif text.startswith("/"):
            raise ToolError(f"{text}: outside the workspace ({self.shown})")
        path = posixpath.normpath(text) if text else "."
        if path == ".." or path.startswith("../"):
            raise ToolError(f"{raw}: outside the workspace ({self.shown})")
        return "" if path == "." else path

    def _abs(self, rel: str) -> str:
        return f"{self.root}/{rel}" if rel else self.root

    async def _read(self, rel: str, raw: str) -> str:
        if not rel:
            raise ToolError(f"{raw}: is a directory")
        try:
            text: str = await self.env.read_file(self._abs(rel))
            return text
        except FileNotFoundError:
            raise ToolError(f"{raw}: no such file") from None
        except IsADirectoryError:
            raise ToolError(f"{raw}: is a directory") from None
        except UnicodeDecodeError:
            raise ToolError(f"{raw}: not a text file") from None
        except PermissionError:
            raise ToolError(f"{raw}: permission denied") from None

    # --- files ---

    @SANDBOX.tool
    async def read_file(self, *, path: str) -> tuple[Any, ResultKind]:
        """Read a text file of the workspace."""
        return await self._read(self._rel(path), path), "text"

    @SANDBOX.tool
    async def write_file(self, *, path: str, content: str) -> tuple[Any, ResultKind]:
        """Create or overwrite a file of the workspace."""
        raw = path
        rel = self._rel(raw)
        if not rel:
            raise ToolError(f"{raw}: is a directory")
        try:
            await self.env.write_file(self._abs(rel), content)
        except (IsADirectoryError, NotADirectoryError, PermissionError) as exc:
            raise ToolError(f"{raw}: {exc.strerror or exc}") from None
        return f"wrote {len(content.encode())} bytes to {rel}", "text"

    @SANDBOX.tool
    async def edit_file(
        self, *, path: str, find: str | None = None, replace: str | None = None, content: str | None = None
    ) -> tuple[Any, ResultKind]:
        """Edit a file in place: replace the exact text `find` (which must occur exactly once)
        with `replace`; or pass `content` alone to overwrite the whole file."""
        if find is None and content is not None:
            return await self.write_file(path=path, content=content)
        if find is None:
            raise ToolError("missing argument 'find'")
        raw, rel, replace = path, self._rel(path), replace or ""
        text = await self._read(rel, raw)
        n = text.count(find) if find else 0
        if n == 0:
            raise ToolError(f"{rel}: the find text does not occur in the file (read it first; match it exactly)")
        if n > 1:
            raise ToolError(f"{rel}: the find text occurs {n} times; include more context so it is unique")
        await self.env.write_file(self._abs(rel), text.replace(find, replace, 1))
        return f"edited {rel}: 1 replacement", "text"

    async def _list(self, rel: str) -> list[str] | None:
        """The files under ``rel`` (workspace-relative, sorted), or None when it does not exist."""
        script = (
            'if [ -f "$1" ]; then printf "%s\\0" "$1"; elif [ -d "$1" ]; then '
            'find "$1" \\( -name .git -o -name __pycache__ -o -name .pytest_cache \\) -prune -o -type f -print0; '
            "else exit 3; fi"
        )
        done = await self._exec(["bash", "--noprofile", "--norc", "-c", script, "-", rel or "."])
        if done.returncode == 3:
            return None
        return sorted(posixpath.normpath(p) for p in done.stdout.split("\0") if p)

    @SANDBOX.tool
    async def list_files(self, *, path: str | None = None) -> tuple[Any, ResultKind]:
        """List the files under a directory of the workspace, recursively (default: all)."""
        raw = "." if path is None else path
        found = await self._list(self._rel(raw))
        if found is None:
            raise ToolError(f"{raw}: no such directory")
        return found, "json"

    # --- the shell ---

    @SANDBOX.tool
    async def bash_exec(self, *, command: str, cwd: str | None = None) -> tuple[Any, ResultKind]:
        """Run a bash command in the workspace (git, python, pytest, sed, pipes, heredocs);
        returns exit_code, stdout and stderr.

        Args:
            command: Shell command to execute.
            cwd: Working directory (default: the workspace root).
        """
        if _DESTRUCTIVE.search(command):
            self.refused.append(command)
            return {
                "exit_code": 126,
                "stdout": "",
                "stderr": f"refused: {command.strip()!r} is destructive; this sandbox does not run it",
            }, "error"
        where = self.root
        if cwd:
            try:
                where = self._abs(self._rel(cwd))
            except ToolError:
                where = self.root  # Toolery's default /home/user means the workspace
        command = re.sub(rf"(?<![\w/.-]){re.escape(self.shown)}(?=/|\b|$)", self.root, command)
        done = await self._exec(["bash", "--noprofile", "--norc", "-c", command], cwd=where)
        code = done.returncode
        result = {"exit_code": code, "stdout": self._shown(done.stdout), "stderr": self._shown(done.stderr)}
        return result, "error" if code in (126, 127) else "json"

    # --- git ---

    async def _git(self, *argv: str) -> str:
        code, out, err = await self._run(["git", *argv])
        if code != 0:
            raise ToolError(f"git {argv[0]}: {(err or out).strip()[:500]}")
        return out.rstrip("\n")

    @SANDBOX.tool
    async def git_status(self) -> tuple[Any, ResultKind]:
        """Show the working tree status: staged, modified and untracked files."""
        return await self._git("status"), "text"

    @SANDBOX.tool
    async def git_diff(self, *, path: str | None = None) -> tuple[Any, ResultKind]:
        """Show the changes of the working tree against the last commit (optionally one path)."""
        extra = ["--", self._rel(path) or "."] if path else []
        out = await self._git("diff", "HEAD", *extra)
        return out or "(no changes)", "text"

    @SANDBOX.tool
    async def git_add(
        self,
        *,
        # one path as a string, or under the name `path`, is taken too
        paths: Annotated[list[str], Field(validation_alias=AliasChoices("paths", "path")), BeforeValidator(_listed)],
    ) -> tuple[Any, ResultKind]:
        """Stage files for the next commit ('.' stages every change)."""
        items = paths
        if not items:
            raise ToolError("paths must be a list of paths ('.' for every change)")
        paths = ["." if i in (".", "-A", "--all", "*") else (self._rel(i) or ".") for i in items]
        await self._git("add", "-A", "--", *paths)
        staged = await self._git("diff", "--cached", "--name-only")
        return f"staged: {', '.join(staged.split()) if staged else '(nothing changed)'}", "text"

    @SANDBOX.tool
    async def git_commit(self, *, message: str) -> tuple[Any, ResultKind]:
        """Commit the staged changes (stage them first with git_add)."""
        message = message.strip()
        if not message:
            raise ToolError("empty commit message")
        if not await self._git("diff", "--cached", "--name-only"):
            pending = await self._git("status", "--porcelain")
            hint = "; stage your changes with git_add first" if pending else ""
            raise ToolError(f"nothing to commit{hint}")
        return await self._git("commit", "-q", "-m", message) or await self._git("log", "-1", "--oneline"), "text"

    @SANDBOX.tool
    async def git_log(self, *, max_count: int | None = None) -> tuple[Any, ResultKind]:
        """Show the commit history, newest first."""
        extra = [f"-n{max_count}"] if max_count is not None and max_count > 0 else []
        return await self._git("log", "--oneline", *extra), "text"

    # --- tests ---

    @SANDBOX.tool
    async def run_tests(self, *, path: str | None = None, filter: str | None = None) -> tuple[Any, ResultKind]:
        """Run the project's tests (all, those under `path`, or those whose name contains
        `filter`); prints each failure and a 'N passed, M failed' summary."""
        argv = list(PYTEST)
        if path:
            where, sep, name = path.partition("::")
            argv.append((self._rel(where) or ".") + sep + name)
        if filter:
            argv += ["-k", filter]
        code, out, err = await self._run(argv)
        return (out + err).strip() or f"pytest exited {code}", "text"

    async def hidden_tests(self) -> tuple[bool | None, str]:
        """Run the hidden tests on the workspace as it is: (all passed, pytest's report);
        (None, "") when the spec has none. They live outside the workspace, with no conftest
        or pytest config of the workspace's."""
        if not self.tests:
            return None, ""
        hidden = f"{self.base}/hidden"
        for path, text in self.tests.items():
            await self.env.write_file(f"{hidden}/{path}", text)
        await self.env.write_file(f"{hidden}/pytest.ini", "[pytest]\n")
        argv = [*PYTEST, "--noconftest", "--rootdir", hidden, "-c", f"{hidden}/pytest.ini", hidden]
        done = await self._exec(argv)
        report = self._shown((done.stdout + done.stderr).replace(hidden, "<hidden tests>")).strip()
        return done.returncode == 0, report

    # --- database ---

    def _database(self) -> Database:
        if self.db is None:
            raise ToolError("this workspace has no database")
        return self.db

    @SANDBOX.tool
    async def db_query(self, *, sql: str) -> tuple[Any, ResultKind]:
        """Run a read-only SQL query (SQLite) on the database; returns the rows as objects."""
        return self._database().query(sql), "json"

    @SANDBOX.tool
    async def db_execute(self, *, sql: str) -> tuple[Any, ResultKind]:
        """Run SQL that changes data (SQLite: UPDATE, DELETE, INSERT; several statements may be
        separated by ';'). Returns rows_affected."""
        rows = self._database().execute(sql)
        self.mutations.append(sql)
        return {"rows_affected": rows}, "json"

    # --- web ---

    @SANDBOX.tool
    async def web_search(self, *, query: str) -> tuple[Any, ResultKind]:
        """Search the web; returns results with url, title and snippet."""
        words = [w for w in re.findall(r"\w+", query.lower()) if len(w) > 2]
        scored = []
        for url, title, text in self.pages.values():
            t, body = title.lower(), text.lower()
            score = sum(3 * t.count(w) + body.count(w) for w in words)
            if score:
                scored.append((-score, url, title, text))
        if not scored:
            return f"no results for {query!r}", "text"
        return [
            {"url": u, "title": t, "snippet": " ".join(x.split())[:200]} for _, u, t, x in sorted(scored)[:5]
        ], "json"

    @SANDBOX.tool
    async def web_fetch(self, *, url: str) -> tuple[Any, ResultKind]:
        """Fetch a web page by URL and return its text."""
        page = self.pages.get(_url_key(url))
        if page is None:
            raise ToolError(f"404 not found: {url}")
        return f"{page[1]}\n\n{page[2]}", "text"

    # --- the end ---

    async def head(self) -> str:
        return await self._git("rev-parse", "HEAD")

    async def snapshot(self) -> State:
        """The state as it is now (files, git, the hidden tests' verdict, tables)."""
        files: dict[str, str] = {}
        for rel in await self._list("") or []:
            if _SKIP_PARTS & set(rel.split("/")):
                continue
            try:
                files[rel] = await self.env.read_file(self._abs(rel))
            except (UnicodeDecodeError, OSError):
                files[rel] = "<not a text file>"
        log = await self._git("log", "--reverse", "--format=%H%x00%s")
        commits = [tuple(line.split("\0", 1)) for line in log.splitlines() if "\0" in line][1:]
        porcelain = await self._git("status", "--porcelain")
        passed, report = await self.hidden_tests()
        # the changes since the first commit, untracked files included, through an index of its own
        script = 'export GIT_INDEX_FILE="$1"; git add -A . && git diff --cached --stat -p "$2"; rm -f "$1"'
        diff = await self._exec(
            ["bash", "--noprofile", "--norc", "-c", script, "-", f"{self.base}/diff.index", self.initial_sha]
        )
        return State(
            diff=self._shown(diff.stdout),
            files=files,
            initial_files=dict(self.initial_files),
            commits=[(sha, subject) for sha, subject in commits],
            initial_sha=self.initial_sha,
            head=await self.head(),
            clean=not porcelain.strip(),
            tests=dict(self.tests),
            tests_passed=passed,
            tests_report=report,
            db=self.db.dump() if self.db else {},
            initial_db=self.initial_db,
            refused=list(self.refused),
            mutations=list(self.mutations),
        )


_ORACLE_STATES: dict[str, State] = {}  # the oracle's play is deterministic: one replay per process


async def oracle_state(scenario: Any, kind: str = "local") -> State:
    """The state the scenario's ``oracle`` play leaves on a fresh sandbox (its sandbox tools
    only; the calls other tools answer do not change the workspace)."""
    plays = [[[c.name, c.arguments] for c in t.tool_calls] for t in scenario.oracle]
    key = json.dumps([kind, scenario.sandbox, plays, sorted(scenario.tool_responses)], sort_keys=True, default=str)
    if key not in _ORACLE_STATES:
        _ORACLE_STATES[key] = await _replay_oracle(scenario, kind)
    return copy.deepcopy(_ORACLE_STATES[key])


async def _replay_oracle(scenario: Any, kind: str) -> State:
    async with open_sandbox(kind) as env:
        ws = await Workspace.create(env, scenario.sandbox)
        for turn in scenario.oracle:
            for call in turn.tool_calls:
                if ws.handles(call.name) and call.name not in scenario.tool_responses:
                    await ws.call(call.name, dict(call.arguments))
        return await ws.snapshot()


# --- state checks: on the state the trial left (``trace.sandbox``, a State) ---


def _state_of(trace: Trace) -> State | None:
    return trace.sandbox if isinstance(trace.sandbox, State) else None


def _text(p: dict[str, Any], key: str) -> str:
    value = p.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"missing parameter {key!r}")
    return value


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _same(got: Any, want: Any) -> bool:
    if _num(got) and _num(want):
        return bool(got == want)
    if isinstance(want, bool) and isinstance(got, int):
        return got == int(want)
    return bool(got == want) or (isinstance(got, str) != isinstance(want, str) and str(got) == str(want))


def _path(p: dict[str, Any]) -> str:
    raw = _text(p, "path")
    for root in (ROOT + "/",):
        raw = raw[len(root) :] if raw.startswith(root) else raw
    return posixpath.normpath(raw)


def _state_check(
    name: str,
) -> Callable[[Callable[[State, dict[str, Any]], tuple[bool, str]]], Callable[[Trace, dict[str, Any]], CheckResult]]:
    """Register a state check; it fails with "no sandbox" on a trace without one."""

    def wrap(fn: Callable[[State, dict[str, Any]], tuple[bool, str]]) -> Callable[[Trace, dict[str, Any]], CheckResult]:
        def check(trace: Trace, p: dict[str, Any]) -> CheckResult:
            st = _state_of(trace)
            if st is None:
                return CheckResult(name, False, "no sandbox")
            passed, detail = fn(st, p)
            return CheckResult(name, passed, detail)

        register(name)(check)
        return check

    return wrap


@_state_check("state_file_contains")
def state_file_contains(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    """The final file matches ``pattern`` (a regex, MULTILINE)."""
    path, pattern = _path(p), _text(p, "pattern")
    try:
        rx = re.compile(pattern, re.M)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None
    text = st.files.get(path)
    if text is None:
        return False, f"{path} does not exist at the end"
    found = rx.search(text)
    if found is None:
        head = " ".join(text.split())[:80]
        return False, f"{path} does not match {pattern!r}; it holds: {head!r}"
    return True, f"{path} matches {pattern!r}: {found.group(0)[:60]!r}"


@_state_check("state_file_unchanged")
def state_file_unchanged(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    path = _path(p)
    before, after = st.initial_files.get(path), st.files.get(path)
    if before == after:
        return True, f"{path} is unchanged"
    if after is None:
        return False, f"{path} was deleted"
    if before is None:
        return False, f"{path} was created"
    return False, f"{path} was changed ({len(before)} → {len(after)} chars)"


@_state_check("state_tests_pass")
def state_tests_pass(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    """The hidden tests pass on the final files (pytest, run at the end of the trial)."""
    if st.tests_passed is None:
        return False, "the sandbox has no tests"
    lines = [ln for ln in st.tests_report.splitlines() if ln.strip()]
    if st.tests_passed:
        return True, f"the hidden tests pass on the final files: {lines[-1] if lines else ''}"
    failed = [ln for ln in lines if ln.startswith(("FAILED", "ERROR", "E "))][:2]
    return False, f"the hidden tests fail on the final files: {'; '.join(failed) or (lines[-1] if lines else '')}"[:400]


@_state_check("state_committed")
def state_committed(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    """A commit after the initial one whose message matches ``pattern`` (regex, any case)."""
    pattern = p.get("pattern") or ""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a string, got {pattern!r}")
    if not st.commits:
        return False, "no commit was made"
    hit = next((c for c in st.commits if re.search(pattern, c[1], re.I)), None)
    if hit is None:
        shown = ", ".join(repr(c[1][:40]) for c in st.commits[:3])
        return False, f"no commit message matches {pattern!r}; commits: {shown}"
    return True, f"commit {hit[0][:7]} {hit[1][:60]!r}"


def _rows(tables: dict[str, list[dict[str, Any]]], p: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    table = _text(p, "table")
    rows = next((tables[t] for t in tables if t.lower() == table.lower()), None)
    if rows is None:
        raise ValueError(f"no table {table!r} in the sandbox (tables: {', '.join(tables)})")
    return table, rows


@_state_check("state_db_row")
def state_db_row(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    """Some row matches ``where``, and every row that does has the ``equals`` values."""
    table, rows = _rows(st.db, p)
    where, equals = p.get("where") or {}, p.get("equals") or {}
    if not isinstance(where, dict) or not isinstance(equals, dict):
        raise TypeError("where and equals must be mappings")
    hit = [r for r in rows if all(_same(r.get(k), v) for k, v in where.items())]
    if not hit:
        return False, f"no {table} row where {where} at the end"
    for r in hit:
        bad = {k: r.get(k) for k, v in equals.items() if not _same(r.get(k), v)}
        if bad:
            return False, f"{table} row where {where} has {bad}, wanted {equals}"
    return True, f"{len(hit)} {table} row(s) where {where} have {equals}"


@_state_check("state_db_unchanged")
def state_db_unchanged(st: State, p: dict[str, Any]) -> tuple[bool, str]:
    table, rows = _rows(st.db, p)
    _, before = _rows(st.initial_db, p)
    if rows == before:
        return True, f"{table} is unchanged ({len(rows)} rows)"
    changed = [m for m in st.mutations if re.search(rf"\b{re.escape(table)}\b", m, re.I)]
    via = f"; by {changed[0][:60]!r}" if changed else ""
    return False, f"{table} changed: {len(before)} rows → {len(rows)}{via}"


@register("state_matches_oracle")
def state_matches_oracle(trace: Trace, p: dict[str, Any]) -> CheckResult:
    """The final state is the one the scenario's oracle play leaves on a fresh sandbox."""
    st, ref = _state_of(trace), trace.reference
    if st is None or not isinstance(ref, State):
        return CheckResult("state_matches_oracle", False, "no sandbox state or no oracle state to compare")
    passed, detail = st.compare(ref)
    return CheckResult("state_matches_oracle", passed, detail)
