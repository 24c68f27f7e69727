"""Stateful mock tools for a scenario: a virtual workspace, in process and deterministic.

Nothing here touches the real filesystem, starts a process or opens a socket. A scenario's
``sandbox`` mapping (the spec) seeds the state; the tools change it; the ``state_*`` checks
read what it ended as (``trace.sandbox``).

Spec keys, all optional:

- ``kind``: a label for people ("repo", "db", "web", …); it changes nothing;
- ``files``: {path: text}: the workspace, which is also the first commit of its git history;
  paths are relative ("src/app.py"); the shell shows them under ``cwd``;
- ``cwd``: the directory the shell shows as the workspace root (default ``/workspace``);
- ``tests``: what ``run_tests`` runs: a list of rules, or {name: rule}. A rule is
  ``{name, file, path?, must_contain?, must_not_contain?, must_match?, message?}``: the test
  passes iff ``file`` exists and holds every ``must_contain`` text, no ``must_not_contain``
  text, and matches every ``must_match`` regex (each a string or a list); ``path`` is the
  test file it is reported under (default ``tests/test_<file stem>.py``), ``message`` the
  assertion shown when it fails;
- ``db``: {table: [row, ...]}: rows are flat mappings; ``db_query`` / ``db_execute`` speak a
  small SQL subset (see their descriptions in :data:`SANDBOX_TOOLS`);
- ``pages``: {url: text | {title, text}}: what ``web_fetch`` returns and ``web_search``
  searches (URLs match without scheme, ``www.`` or a trailing slash);
- ``fail_once``: [tool, ...]: each of these answers its first call with
  ``error: temporarily unavailable (503), retry`` (and does nothing), then works.

``bash_exec`` interprets ls, cat, grep, wc, head, tail, echo, pwd, find, cd, ``git``
status/diff/log/add/commit and ``pytest`` over the workspace, with ``|``, ``&&``, ``||`` and
``;``. Any other command exits 127 ("command not found"); a destructive one (rm, dd, mkfs,
``git reset --hard``, ``curl … | sh``, …) is recorded in ``refused`` and not run.

Every tool answers ``(result, kind)``; kind is "error" for a failure (a bad argument, a
missing file, a refused command, an injected 503), which the model can recover from.
"""

from __future__ import annotations

import copy
import difflib
import fnmatch
import hashlib
import posixpath
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ._checks import register
from ._trace import CheckResult, ResultKind, Trace

ROOT = "/workspace"
UNAVAILABLE = "error: temporarily unavailable (503), retry"
SPEC_KEYS = frozenset({"kind", "files", "cwd", "tests", "db", "pages", "fail_once"})


def _fn(name: str, description: str, props: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": props, "required": required},
        },
    }


_S = {"type": "string"}
SANDBOX_TOOLS: dict[str, dict[str, Any]] = {
    s["function"]["name"]: s
    for s in (
        _fn("read_file", "Read a text file of the workspace.", {"path": _S}, ["path"]),
        _fn(
            "write_file",
            "Create or overwrite a file of the workspace.",
            {"path": _S, "content": _S},
            ["path", "content"],
        ),
        _fn(
            "edit_file",
            "Edit a file in place: replace the exact text `find` (which must occur exactly once) "
            "with `replace`; or pass `content` alone to overwrite the whole file.",
            {"path": _S, "find": _S, "replace": _S, "content": _S},
            ["path"],
        ),
        _fn(
            "list_files",
            "List the files under a directory of the workspace, recursively (default: all).",
            {"path": _S},
            [],
        ),
        _fn(
            "bash_exec",
            "Run a shell command in the workspace. Supported: ls, cat, grep, wc, head, tail, "
            "echo, pwd, find, cd, git status|diff|log|add|commit, pytest; pipes (|), &&, || and ;.",
            {
                "command": {"type": "string", "description": "Shell command to execute."},
                "cwd": {
                    "type": "string",
                    "description": "Working directory (default: the workspace root).",
                },
            },
            ["command"],
        ),
        _fn(
            "git_status",
            "Show the working tree status: staged, modified and untracked files.",
            {},
            [],
        ),
        _fn(
            "git_diff",
            "Show the changes of the working tree against the last commit (optionally one path).",
            {"path": _S},
            [],
        ),
        _fn(
            "git_add",
            "Stage files for the next commit ('.' stages every change).",
            {"paths": {"type": "array", "items": _S}},
            ["paths"],
        ),
        _fn(
            "git_commit",
            "Commit the staged changes (stage them first with git_add).",
            {"message": _S},
            ["message"],
        ),
        _fn(
            "git_log",
            "Show the commit history, newest first.",
            {"max_count": {"type": "integer"}},
            [],
        ),
        _fn(
            "run_tests",
            "Run the project's tests (all, those under `path`, or those whose name contains "
            "`filter`); prints each failure and a 'N passed, M failed' summary.",
            {"path": _S, "filter": _S},
            [],
        ),
        _fn(
            "db_query",
            "Run a read-only SQL query on the database: SELECT "
            "*|columns|COUNT(*)|SUM(col)|MIN(col)|"
            "MAX(col)|AVG(col) FROM table [WHERE col op value [AND ...]] [ORDER BY col [ASC|DESC]] "
            "[LIMIT n]; "
            "op is =, !=, <, <=, >, >=, LIKE or IN (...). Returns the rows as objects.",
            {"sql": _S},
            ["sql"],
        ),
        _fn(
            "db_execute",
            "Run SQL that changes data: UPDATE table SET col = value[, ...] [WHERE ...] or "
            "DELETE FROM table [WHERE ...] (value: a literal, or col +|-|*|/ number). Returns "
            "rows_affected.",
            {"sql": _S},
            ["sql"],
        ),
        _fn(
            "web_search",
            "Search the web; returns results with url, title and snippet.",
            {"query": _S},
            ["query"],
        ),
        _fn("web_fetch", "Fetch a web page by URL and return its text.", {"url": _S}, ["url"]),
    )
}

_DESTRUCTIVE = re.compile(
    r"(?:^|[\s;&|(`])(?:sudo\s+)?"
    r"(?:rm|rmdir|shred|unlink|mkfs(?:\.\w+)?|dd|truncate|wipefs|fdisk)(?:\s|$)"
    r"|\bgit\s+(?:reset\s+--hard|clean\b|push\b[^|;&]*(?:\s-f\b|--force)"
    r"|branch\s+-D\b|checkout\s+--\s)"
    r"|\b(?:curl|wget)\b[^|]*\|\s*(?:sudo\s+)?(?:ba|z|da)?sh\b"
    r"|:\(\)\s*\{|\bchmod\s+-R\b|\bdrop\s+(?:table|database)\b",
    re.I,
)
_DEVNULL = re.compile(r"\s*(?:[12]?>>?\s*/dev/null|2>&1)")
_COMMANDS = "ls, cat, grep, wc, head, tail, echo, pwd, find, cd, git, pytest"


class ToolError(Exception):
    """A bad call: becomes an ("error: ...", "error") result."""


@dataclass(frozen=True)
class MockTest:
    name: str
    file: str
    path: str
    must_contain: tuple[str, ...] = ()
    must_not_contain: tuple[str, ...] = ()
    must_match: tuple[str, ...] = ()
    message: str = ""


@dataclass
class Commit:
    sha: str
    message: str
    files: dict[str, str]


def _strings(value: Any, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    if not all(isinstance(x, str) for x in items):
        raise ValueError(f"{what} must be a string or a list of strings, got {value!r}")
    return tuple(items)


def _test_rules(raw: Any) -> list[MockTest]:
    if raw is None:
        return []
    if isinstance(raw, dict):
        raw = [{"name": name, **rule} for name, rule in raw.items()]
    if not isinstance(raw, list) or not all(isinstance(r, dict) for r in raw):
        raise ValueError("sandbox tests must be a list of rules or a mapping of name to rule")
    rules = []
    for r in raw:
        unknown = set(r) - {
            "name",
            "file",
            "path",
            "must_contain",
            "must_not_contain",
            "must_match",
            "message",
        }
        if unknown or not isinstance(r.get("name"), str) or not isinstance(r.get("file"), str):
            raise ValueError(f"bad test rule {r!r}: needs name and file; unknown keys {sorted(unknown)}")
        file = r["file"]
        stem = posixpath.splitext(posixpath.basename(file))[0]
        for rx in _strings(r.get("must_match"), "must_match"):
            re.compile(rx)
        rules.append(
            MockTest(
                r["name"],
                file,
                r.get("path") or f"tests/test_{stem}.py",
                _strings(r.get("must_contain"), "must_contain"),
                _strings(r.get("must_not_contain"), "must_not_contain"),
                _strings(r.get("must_match"), "must_match"),
                str(r.get("message") or ""),
            )
        )
    return rules


def _url_key(url: str) -> str:
    key = re.sub(r"^[a-z]+://", "", url.strip(), flags=re.I)
    key = re.sub(r"^www\.", "", key, flags=re.I)
    host, _, rest = key.partition("/")
    return (host.lower() + ("/" + rest if rest else "")).rstrip("/")


def _sha(*parts: str) -> str:
    return hashlib.sha1("\0".join(parts).encode()).hexdigest()[:7]


# --- SQL ---

_LITERAL = r"'(?:[^']|'')*'|\"[^\"]*\"|[^\s,()]+"
_SELECT = re.compile(
    r"SELECT\s+(?P<cols>.+?)\s+FROM\s+(?P<table>\w+)(?:\s+WHERE\s+(?P<where>.+?))?"
    r"(?:\s+ORDER\s+BY\s+(?P<order>\w+)(?:\s+(?P<dir>ASC|DESC))?)?"
    r"(?:\s+LIMIT\s+(?P<limit>\d+))?",
    re.I | re.S,
)
_UPDATE = re.compile(r"UPDATE\s+(?P<table>\w+)\s+SET\s+(?P<set>.+?)(?:\s+WHERE\s+(?P<where>.+))?", re.I | re.S)
_DELETE = re.compile(r"DELETE\s+FROM\s+(?P<table>\w+)(?:\s+WHERE\s+(?P<where>.+))?", re.I | re.S)
_COND = re.compile(
    rf"(?P<col>\w+)\s*(?:(?P<op>!=|<>|<=|>=|=|<|>|\bLIKE\b)\s*(?P<val>{_LITERAL})"
    r"|\s+IN\s*\((?P<vals>[^)]*)\))",
    re.I | re.S,
)
_ASSIGN = re.compile(
    rf"(?P<col>\w+)\s*=\s*(?:(?P<src>\w+)\s*(?P<op>[-+*/])\s*(?P<num>-?\d+(?:\.\d+)?)"
    rf"|(?P<val>{_LITERAL}))",
    re.S,
)
_AGG = re.compile(r"(COUNT|SUM|MIN|MAX|AVG)\s*\(\s*(\*|\w+)\s*\)", re.I)


def _literal(text: str) -> Any:
    t = text.strip()
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"":
        return t[1:-1].replace("''", "'")
    if re.fullmatch(r"-?\d+", t):
        return int(t)
    if re.fullmatch(r"-?\d+\.\d+", t):
        return float(t)
    return {"true": True, "false": False, "null": None}.get(t.lower(), t)


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _cmp(got: Any, op: str, want: Any) -> bool:
    if op.upper() == "LIKE":
        rx = "".join(".*" if c == "%" else "." if c == "_" else re.escape(c) for c in str(want))
        return re.fullmatch(rx, str(got), re.I | re.S) is not None
    if got is None or want is None:
        return (got is want) == (op == "=")
    a, b = (got, want) if _num(got) and _num(want) else (str(got), str(want))
    return {
        "=": a == b,
        "!=": a != b,
        "<>": a != b,
        "<": a < b,
        "<=": a <= b,
        ">": a > b,
        ">=": a >= b,
    }[op]


def _split_top(text: str, sep: str) -> list[str]:
    """Split at ``sep`` outside quotes."""
    out: list[str] = []
    cur: list[str] = []
    quote = ""
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch == sep:
            out.append("".join(cur))
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur))
    return [s for s in (x.strip() for x in out) if s]


# --- the sandbox ---


class VirtualSandbox:
    """The tools of one trial over one spec's state (see the module docstring)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        unknown = set(spec) - SPEC_KEYS
        if unknown:
            raise ValueError(f"unknown sandbox keys {sorted(unknown)} (known: {', '.join(sorted(SPEC_KEYS))})")
        files = spec.get("files") or {}
        if not isinstance(files, dict) or not all(isinstance(v, str) for v in files.values()):
            raise ValueError("sandbox files must map paths to text")
        self.root = str(spec.get("cwd") or ROOT).rstrip("/") or ROOT
        self.cwd = ""
        self.initial_files = {self._path(p): t for p, t in files.items()}
        self.files = dict(self.initial_files)
        self.index = dict(self.initial_files)
        self.commits = [Commit(_sha("initial", *sorted(self.files)), "initial commit", dict(self.files))]
        self.tests = _test_rules(spec.get("tests"))
        db = spec.get("db") or {}
        if not isinstance(db, dict) or not all(
            isinstance(r, list) and all(isinstance(x, dict) for x in r) for r in db.values()
        ):
            raise ValueError("sandbox db must map table names to lists of rows (mappings)")
        self.initial_db: dict[str, list[dict[str, Any]]] = copy.deepcopy(db)
        self.db: dict[str, list[dict[str, Any]]] = copy.deepcopy(db)
        self.pages: dict[str, tuple[str, str, str]] = {}
        for url, page in (spec.get("pages") or {}).items():
            title, text = (page.get("title", url), page.get("text", "")) if isinstance(page, dict) else (url, page)
            self.pages[_url_key(url)] = (url, str(title), str(text))
        self.fail_once = set(_strings(spec.get("fail_once"), "fail_once"))
        unknown_tools = self.fail_once - set(SANDBOX_TOOLS)
        if unknown_tools:
            raise ValueError(f"fail_once names tools the sandbox does not have: {sorted(unknown_tools)}")
        self.failed: set[str] = set()
        self.mutations: list[str] = []
        self.refused: list[str] = []
        self._tools: dict[str, Callable[[dict[str, Any]], tuple[Any, ResultKind]]] = {
            "read_file": self.read_file,
            "write_file": self.write_file,
            "edit_file": self.edit_file,
            "list_files": self.list_files,
            "bash_exec": self.bash_exec,
            "git_status": self.git_status,
            "git_diff": self.git_diff,
            "git_add": self.git_add,
            "git_commit": self.git_commit,
            "git_log": self.git_log,
            "run_tests": self.run_tests,
            "db_query": self.db_query,
            "db_execute": self.db_execute,
            "web_search": self.web_search,
            "web_fetch": self.web_fetch,
        }

    def handles(self, name: str) -> bool:
        return name in self._tools

    def call(self, name: str, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        tool = self._tools.get(name)
        if tool is None:
            return f"error: the sandbox has no tool {name!r}", "error"
        if name in self.fail_once and name not in self.failed:
            self.failed.add(name)
            return UNAVAILABLE, "error"
        try:
            return tool(args if isinstance(args, dict) else {})
        except ToolError as exc:
            return f"error: {exc}", "error"

    # --- paths and arguments ---

    def _path(self, raw: Any) -> str:
        text = str(raw).strip()
        if text == self.root or text.startswith(self.root + "/"):
            text = text[len(self.root) :].lstrip("/")
            base = ""
        elif text.startswith("/"):
            raise ToolError(f"{text}: outside the workspace ({self.root})")
        else:
            base = self.cwd
        path = posixpath.normpath(posixpath.join(base, text)) if text else (base or ".")
        if path == "..":
            raise ToolError(f"{raw}: outside the workspace ({self.root})")
        if path.startswith("../"):
            raise ToolError(f"{raw}: outside the workspace ({self.root})")
        return "" if path == "." else path

    def _is_dir(self, path: str) -> bool:
        return path == "" or any(f.startswith(path + "/") for f in self.files)

    def _under(self, path: str) -> list[str]:
        return sorted(f for f in self.files if path == "" or f == path or f.startswith(path + "/"))

    @staticmethod
    def _arg(args: dict[str, Any], key: str, default: str | None = None) -> str:
        value = args.get(key, default)
        if value is None:
            raise ToolError(f"missing argument {key!r}")
        if not isinstance(value, str):
            raise ToolError(f"argument {key!r} must be a string, got {type(value).__name__}")
        return value

    def _existing(self, raw: str) -> str:
        path = self._path(raw)
        if path in self.files:
            return path
        if self._is_dir(path):
            raise ToolError(f"{raw}: is a directory")
        same = [f for f in self.files if posixpath.basename(f) == posixpath.basename(path)]
        hint = f" (did you mean {', '.join(sorted(same))}?)" if same else ""
        raise ToolError(f"{raw}: no such file{hint}")

    # --- files ---

    def read_file(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        return self.files[self._existing(self._arg(args, "path"))], "text"

    def write_file(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        path, content = self._path(self._arg(args, "path")), self._arg(args, "content")
        if path == "" or (self._is_dir(path) and path not in self.files):
            raise ToolError(f"{args['path']}: is a directory")
        self.files[path] = content
        return f"wrote {len(content.encode())} bytes to {path}", "text"

    def edit_file(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        if args.get("find") is None and args.get("content") is not None:
            return self.write_file({"path": args.get("path"), "content": args["content"]})
        path = self._existing(self._arg(args, "path"))
        find, replace = self._arg(args, "find"), self._arg(args, "replace", "")
        text = self.files[path]
        n = text.count(find) if find else 0
        if n == 0:
            raise ToolError(f"{path}: the find text does not occur in the file (read it first; match it exactly)")
        if n > 1:
            raise ToolError(f"{path}: the find text occurs {n} times; include more context so it is unique")
        self.files[path] = text.replace(find, replace, 1)
        return f"edited {path}: 1 replacement", "text"

    def list_files(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        path = self._path(self._arg(args, "path", "."))
        if path not in self.files and not self._is_dir(path):
            raise ToolError(f"{args.get('path')}: no such directory")
        return self._under(path), "json"

    # --- git ---

    def _head(self) -> dict[str, str]:
        return self.commits[-1].files

    @staticmethod
    def _changes(old: dict[str, str], new: dict[str, str]) -> list[tuple[str, str]]:
        out = []
        for p in sorted(set(old) | set(new)):
            if p not in new:
                out.append(("deleted", p))
            elif p not in old:
                out.append(("new file", p))
            elif old[p] != new[p]:
                out.append(("modified", p))
        return out

    def git_status(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        staged = self._changes(self._head(), self.index)
        tracked = {p: t for p, t in self.files.items() if p in self.index}
        unstaged = self._changes(self.index, tracked)
        untracked = sorted(p for p in self.files if p not in self.index)
        lines = ["On branch main"]
        if staged:
            lines += ["Changes to be committed:"] + [f"  {k}:   {p}" for k, p in staged]
        if unstaged:
            lines += ["Changes not staged for commit:"] + [f"  {k}:   {p}" for k, p in unstaged]
        if untracked:
            lines += ["Untracked files:"] + [f"  {p}" for p in untracked]
        if len(lines) == 1:
            lines.append("nothing to commit, working tree clean")
        return "\n".join(lines), "text"

    def git_diff(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        only = self._path(args["path"]) if isinstance(args.get("path"), str) and args["path"] else None
        head = self._head()
        out: list[str] = []
        for _, p in self._changes(head, self.files):
            if only is not None and p != only and not p.startswith(only + "/"):
                continue
            out.extend(
                difflib.unified_diff(
                    head.get(p, "").splitlines(),
                    self.files.get(p, "").splitlines(),
                    f"a/{p}" if p in head else "/dev/null",
                    f"b/{p}" if p in self.files else "/dev/null",
                    lineterm="",
                )
            )
        return ("\n".join(out) if out else "(no changes)"), "text"

    def git_add(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        raw = args.get("paths", args.get("path"))
        items = [raw] if isinstance(raw, str) else raw
        if not isinstance(items, list) or not items or not all(isinstance(x, str) for x in items):
            raise ToolError("paths must be a list of paths ('.' for every change)")
        known = set(self.files) | set(self.index)
        chosen: set[str] = set()
        for item in items:
            path = "" if item in (".", "-A", "--all", "*") else self._path(item)
            hit = {p for p in known if path == "" or p == path or p.startswith(path + "/")}
            if not hit:
                raise ToolError(f"pathspec {item!r} did not match any files")
            chosen |= hit
        for p in chosen:
            if p in self.files:
                self.index[p] = self.files[p]
            else:
                self.index.pop(p, None)
        changed = [p for _, p in self._changes(self._head(), self.index)]
        return f"staged: {', '.join(changed) if changed else '(nothing changed)'}", "text"

    def git_commit(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        message = self._arg(args, "message").strip()
        if not message:
            raise ToolError("empty commit message")
        changes = self._changes(self._head(), self.index)
        if not changes:
            pending = self._changes(self._head(), self.files)
            hint = "; stage your changes with git_add first" if pending else ""
            raise ToolError(f"nothing to commit{hint}")
        sha = _sha(message, str(len(self.commits)), *(p for _, p in changes))
        self.commits.append(Commit(sha, message, dict(self.index)))
        return f"[main {sha}] {message}\n {len(changes)} file(s) changed", "text"

    def git_log(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        n = args.get("max_count")
        commits = list(reversed(self.commits))
        if isinstance(n, int) and not isinstance(n, bool) and n > 0:
            commits = commits[:n]
        return "\n".join(f"{c.sha} {c.message}" for c in commits), "text"

    # --- tests ---

    def test_failure(self, rule: MockTest) -> str | None:
        """Why the test fails on the current files, or None when it passes."""
        text = self.files.get(rule.file)
        if text is None:
            return f"ImportError: {rule.file} not found"
        ok = (
            all(s in text for s in rule.must_contain)
            and not any(s in text for s in rule.must_not_contain)
            and all(re.search(rx, text, re.M) for rx in rule.must_match)
        )
        return None if ok else (rule.message or "AssertionError")

    def run_tests(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        path_arg = args.get("path")
        raw = path_arg if isinstance(path_arg, str) else ""
        where, _, name = raw.partition("::")
        path = self._path(where) if where else ""
        flt = args.get("filter") if isinstance(args.get("filter"), str) else ""
        chosen = [
            t
            for t in self.tests
            if (path == "" or path in (t.path, t.file) or t.path.startswith(path + "/"))
            and (not name or t.name == name)
            and (not flt or flt in t.name)
        ]
        if not chosen:
            return "no tests ran (no test matched)\n0 passed, 0 failed", "text"
        results = [(t, self.test_failure(t)) for t in chosen]
        lines = [f"{t.path}::{t.name} {'PASSED' if why is None else 'FAILED'}" for t, why in results]
        fails = [f"FAILED {t.path}::{t.name} - {why}" for t, why in results if why is not None]
        summary = f"{len(results) - len(fails)} passed, {len(fails)} failed"
        return "\n".join(lines + ([""] + fails if fails else []) + [summary]), "text"

    # --- database ---

    def _table(self, name: str) -> list[dict[str, Any]]:
        for t in self.db:
            if t.lower() == name.lower():
                return self.db[t]
        raise ToolError(f"no such table: {name} (tables: {', '.join(sorted(self.db)) or 'none'})")

    @staticmethod
    def _columns(rows: list[dict[str, Any]]) -> list[str]:
        return list(dict.fromkeys(k for r in rows for k in r))

    def _column(self, rows: list[dict[str, Any]], col: str) -> str:
        cols = self._columns(rows)
        for c in cols:
            if c.lower() == col.lower():
                return c
        raise ToolError(f"no such column: {col} (columns: {', '.join(cols)})")

    def _where(self, rows: list[dict[str, Any]], where: str | None) -> list[dict[str, Any]]:
        if not where:
            return list(rows)
        if re.search(r"\bOR\b", where, re.I):
            raise ToolError("OR is not supported here; use AND, IN (...) or separate queries")
        conds = []
        for part in re.split(r"\s+AND\s+", where.strip(), flags=re.I):
            part = part.strip()
            m = _COND.fullmatch(part[1:-1].strip() if part[:1] == "(" and part[-1:] == ")" else part)
            if m is None:
                raise ToolError(f"cannot read the condition {part!r} (use col op value)")
            col = self._column(rows, m["col"]) if rows else m["col"]
            if m["vals"] is not None:
                conds.append((col, "IN", [_literal(v) for v in _split_top(m["vals"], ",")]))
            else:
                conds.append((col, m["op"].upper(), _literal(m["val"])))

        def keep(row: dict[str, Any]) -> bool:
            for col, op, want in conds:
                got = row.get(col)
                if op == "IN" and not any(_cmp(got, "=", w) for w in want):
                    return False
                if op != "IN" and not _cmp(got, op, want):
                    return False
            return True

        return [r for r in rows if keep(r)]

    def db_query(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        sql = self._arg(args, "sql").strip().rstrip(";").strip()
        if not re.match(r"SELECT\b", sql, re.I):
            raise ToolError("db_query runs SELECT only; use db_execute for UPDATE / DELETE")
        m = _SELECT.fullmatch(sql)
        if m is None:
            raise ToolError("unsupported query; use SELECT cols FROM table [WHERE ...] [ORDER BY col] [LIMIT n]")
        rows = self._table(m["table"])
        found = self._where(rows, m["where"])
        if m["order"]:
            col = self._column(rows, m["order"])
            found.sort(
                key=lambda r: (
                    r.get(col) is None,
                    r.get(col) if _num(r.get(col)) else str(r.get(col)),
                ),
                reverse=(m["dir"] or "").upper() == "DESC",
            )
        if m["limit"]:
            found = found[: int(m["limit"])]
        items = [c.strip() for c in _split_top(m["cols"], ",")]
        aggs = [_AGG.fullmatch(c) for c in items]
        if all(aggs):
            return [
                {
                    c.lower().replace(" ", ""): self._aggregate(rows, found, a)
                    for c, a in zip(items, aggs)
                    if a is not None
                }
            ], "json"
        if any(aggs):
            raise ToolError("mixing aggregates and columns needs GROUP BY, which is not supported")
        if items == ["*"]:
            return [dict(r) for r in found], "json"
        cols = [self._column(rows, c) for c in items]
        return [{c: r.get(c) for c in cols} for r in found], "json"

    def _aggregate(self, rows: list[dict[str, Any]], found: list[dict[str, Any]], m: re.Match[str]) -> Any:
        fn, arg = m[1].upper(), m[2]
        if arg == "*":
            if fn != "COUNT":
                raise ToolError(f"{fn}(*) is not supported")
            return len(found)
        col = self._column(rows, arg)
        values = [r[col] for r in found if r.get(col) is not None]
        if fn == "COUNT":
            return len(values)
        if not values:
            return None
        if fn in ("MIN", "MAX"):
            try:
                return min(values) if fn == "MIN" else max(values)
            except TypeError:
                raise ToolError(f"{fn}({col}): the column mixes types") from None
        if not all(_num(v) for v in values):
            raise ToolError(f"{fn}({col}): the column is not numeric")
        return sum(values) if fn == "SUM" else sum(values) / len(values)

    def db_execute(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        statements = _split_top(self._arg(args, "sql"), ";")
        if not statements:
            raise ToolError("empty statement")
        total = 0
        for sql in statements:
            total += self._execute(sql)
        return {"rows_affected": total}, "json"

    def _execute(self, sql: str) -> int:
        if re.match(r"SELECT\b", sql, re.I):
            raise ToolError("db_execute changes data; use db_query for SELECT")
        if (m := _UPDATE.fullmatch(sql)) is not None:
            rows = self._table(m["table"])
            assigns = []
            for part in _split_top(m["set"], ","):
                a = _ASSIGN.fullmatch(part.strip())
                if a is None:
                    raise ToolError(f"cannot read the assignment {part!r} (use col = value)")
                col = self._column(rows, a["col"])
                src = self._column(rows, a["src"]) if a["src"] else None
                assigns.append((col, src, a["op"], _literal(a["num"] or a["val"])))
            hit = self._where(rows, m["where"])
            for row in hit:
                for col, src, op, value in assigns:
                    row[col] = value if src is None else self._arith(row.get(src), op, value, src)
            self.mutations.append(sql)
            return len(hit)
        if (m := _DELETE.fullmatch(sql)) is not None:
            rows = self._table(m["table"])
            hit = self._where(rows, m["where"])
            rows[:] = [r for r in rows if not any(r is h for h in hit)]
            self.mutations.append(sql)
            return len(hit)
        raise ToolError("supported: UPDATE table SET col = value [WHERE ...]; DELETE FROM table [WHERE ...]")

    @staticmethod
    def _arith(got: Any, op: str, n: Any, col: str) -> Any:
        if not _num(got):
            raise ToolError(f"{col} is not numeric")
        out = {"+": got + n, "-": got - n, "*": got * n, "/": got / n if n else None}[op]
        if out is None:
            raise ToolError("division by zero")
        return round(out, 6) if isinstance(out, float) else out

    # --- web ---

    def web_fetch(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        url = self._arg(args, "url")
        page = self.pages.get(_url_key(url))
        if page is None:
            raise ToolError(f"404 not found: {url}")
        return f"{page[1]}\n\n{page[2]}", "text"

    def web_search(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        query = self._arg(args, "query")
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

    # --- shell ---

    def bash_exec(self, args: dict[str, Any]) -> tuple[Any, ResultKind]:
        command = self._arg(args, "command")
        if _DESTRUCTIVE.search(command):
            self.refused.append(command)
            return {
                "exit_code": 126,
                "stdout": "",
                "stderr": f"refused: {command.strip()!r} is destructive; this sandbox does not run it",
            }, "error"
        self.cwd = self._cwd(args.get("cwd"))
        try:
            code, out, err = self._script(_DEVNULL.sub("", command))
        except ToolError as exc:
            code, out, err = 2, "", f"bash: {exc}"
        finally:
            self.cwd = ""
        return {"exit_code": code, "stdout": out, "stderr": err}, "error" if code in (
            126,
            127,
        ) else "json"

    def _cwd(self, raw: Any) -> str:
        """The working directory a call asks for; one outside the workspace (Toolery's
        default ``/home/user``) means the workspace root."""
        if not isinstance(raw, str) or not raw:
            return ""
        try:
            path = self._path(raw)
        except ToolError:
            return ""
        return path if self._is_dir(path) and path not in self.files else ""

    def _script(self, command: str) -> tuple[int, str, str]:
        lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens = list(lexer)
        except ValueError as exc:
            raise ToolError(f"syntax error: {exc}") from None
        code, out, err, sep = 0, [], [], ";"
        segment: list[str] = []
        for tok in tokens + [";"]:
            if tok not in ("&&", "||", ";"):
                segment.append(tok)
                continue
            if segment and (sep == ";" or (sep == "&&") == (code == 0)):
                code, o, e = self._pipeline(segment)
                out.append(o)
                err.append(e)
                if code == 127:
                    break
            segment, sep = [], tok
        return code, "".join(out), "".join(err)

    def _pipeline(self, tokens: list[str]) -> tuple[int, str, str]:
        if any(t in (">", ">>", "<", "<<", "&", "(", ")", ";;", "|&", ">&") for t in tokens):
            raise ToolError("redirection, background jobs and subshells are not supported (use write_file)")
        stages: list[list[str]] = [[]]
        for t in tokens:
            if t == "|":
                stages.append([])
            else:
                stages[-1].append(t)
        stdin: str | None = None
        code, err = 0, ""
        for argv in stages:
            if not argv:
                raise ToolError("syntax error near '|'")
            handler = self._shell_commands().get(argv[0])
            if handler is None:
                return 127, "", f"bash: {argv[0]}: command not found (supported: {_COMMANDS})\n"
            code, stdin, e = handler(argv[1:], stdin)
            err += e
        return code, stdin or "", err

    def _shell_commands(self) -> dict[str, Callable[[list[str], str | None], tuple[int, str, str]]]:
        return {
            "ls": self._ls,
            "cat": self._cat,
            "grep": self._grep,
            "wc": self._wc,
            "head": self._head_tail,
            "tail": self._head_tail_end,
            "echo": self._echo,
            "pwd": self._pwd,
            "find": self._find,
            "cd": self._cd,
            "git": self._git,
            "pytest": self._pytest,
            "python": self._python,
            "python3": self._python,
        }

    def _operands(self, items: list[str]) -> list[str]:
        """Paths with shell globs expanded (a glob that matches nothing stays as it is)."""
        out = []
        for item in items:
            if any(c in item for c in "*?["):
                pattern = self._path(item)
                hits = sorted(f for f in self.files if fnmatch.fnmatchcase(f, pattern))
                out.extend(hits or [item])
            else:
                out.append(item)
        return out

    @staticmethod
    def _flags(argv: list[str]) -> tuple[set[str], list[str]]:
        flags, rest = set(), []
        for a in argv:
            if a.startswith("--"):
                flags.add(a)
            elif a.startswith("-") and len(a) > 1 and not a[1:].isdigit():
                flags.update(a[1:])
            else:
                rest.append(a)
        return flags, rest

    def _show(self, path: str) -> str:
        return path if path else "."

    def _ls(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        flags, paths = self._flags(argv)
        out, err, code = [], [], 0
        targets = self._operands(paths) or ["."]
        for raw in targets:
            path = self._path(raw)
            if path in self.files:
                out.append(raw)
                continue
            if not self._is_dir(path):
                err.append(f"ls: cannot access '{raw}': No such file or directory\n")
                code = 2
                continue
            prefix = path + "/" if path else ""
            names = sorted(
                {f[len(prefix) :].split("/")[0] + ("/" if "/" in f[len(prefix) :] else "") for f in self._under(path)}
            )
            names = [n for n in names if "a" in flags or not n.startswith(".")]
            if "l" in flags:
                names = [
                    f"{'d' if n.endswith('/') else '-'}rw-r--r--  {len(self.files.get(prefix + n, '')):>6}  {n}"
                    for n in names
                ]
            block = "\n".join(names)
            out.append(f"{raw}:\n{block}" if len(targets) > 1 else block)
        return code, "\n".join(out) + ("\n" if out else ""), "".join(err)

    def _read_operands(self, cmd: str, paths: list[str], stdin: str | None) -> tuple[list[tuple[str, str]], str]:
        if not paths:
            return [("", stdin or "")], ""
        found, err = [], []
        for raw in self._operands(paths):
            path = self._path(raw)
            if path in self.files:
                found.append((raw, self.files[path]))
            elif self._is_dir(path):
                err.append(f"{cmd}: {raw}: Is a directory\n")
            else:
                err.append(f"{cmd}: {raw}: No such file or directory\n")
        return found, "".join(err)

    def _cat(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        flags, paths = self._flags(argv)
        found, err = self._read_operands("cat", paths, stdin)
        text = "".join(t for _, t in found)
        if "n" in flags:
            text = "".join(f"{i:>6}\t{line}\n" for i, line in enumerate(text.splitlines(), 1))
        return (1 if err else 0), text, err

    def _grep(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        flags, rest, include = set(), [], []
        pattern: str | None = None
        it = iter(argv)
        for a in it:
            if a == "-e":
                pattern = next(it, "")
            elif a.startswith("--include="):
                include.append(a.split("=", 1)[1])
            elif a.startswith("--"):
                flags.add(a)
            elif a.startswith("-") and len(a) > 1:
                flags.update(a[1:])
            else:
                rest.append(a)
        if pattern is None:
            if not rest:
                return 2, "", "grep: no pattern given\n"
            pattern = rest.pop(0)
        if "F" in flags:
            rx_text = re.escape(pattern)
        elif "E" in flags:
            rx_text = pattern
        else:
            rx_text = re.sub(r"\\([|(){}+?])", r"\1", pattern)
        if "w" in flags:
            rx_text = rf"\b(?:{rx_text})\b"
        try:
            rx = re.compile(rx_text, re.I if "i" in flags else 0)
        except re.error:
            rx = re.compile(re.escape(pattern), re.I if "i" in flags else 0)
        recursive = bool(flags & {"r", "R"})
        sources: list[tuple[str, str]] = [] if rest or recursive else [("", stdin or "")]
        err = []
        for raw in self._operands(rest) if rest else (["."] if recursive else []):
            path = self._path(raw)
            if path in self.files:
                sources.append((raw, self.files[path]))
            elif self._is_dir(path):
                if not recursive:
                    err.append(f"grep: {raw}: Is a directory\n")
                    continue
                shown = "" if not rest else raw.rstrip("/") + "/"
                prefix = path + "/" if path else ""
                for f in self._under(path):
                    if include and not any(fnmatch.fnmatchcase(posixpath.basename(f), g) for g in include):
                        continue
                    sources.append((shown + f[len(prefix) :], self.files[f]))
            else:
                err.append(f"grep: {raw}: No such file or directory\n")
        named = recursive or len(sources) > 1
        out, matched = [], False
        for name, text in sources:
            hits = [(i, line) for i, line in enumerate(text.splitlines(), 1) if bool(rx.search(line)) != ("v" in flags)]
            matched |= bool(hits)
            if "l" in flags:
                out.extend([f"{name}\n"] if hits else [])
            elif "c" in flags:
                out.append(f"{name}:{len(hits)}\n" if named else f"{len(hits)}\n")
            else:
                for i, line in hits:
                    head = (f"{name}:" if named else "") + (f"{i}:" if "n" in flags else "")
                    out.append(f"{head}{line}\n")
        return (2 if err and not matched else 0 if matched else 1), "".join(out), "".join(err)

    def _wc(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        flags, paths = self._flags(argv)
        found, err = self._read_operands("wc", paths, stdin)
        chosen = [k for k in "lwc" if k in flags] or ["l", "w", "c"]

        def counts(text: str) -> list[int]:
            table = {"l": text.count("\n"), "w": len(text.split()), "c": len(text.encode())}
            return [table[k] for k in chosen]

        rows = [(name, counts(text)) for name, text in found]
        if len(rows) > 1:
            rows.append(("total", [sum(c[i] for _, c in rows) for i in range(len(chosen))]))
        out = "".join(" ".join(f"{n:>7}" for n in c) + (f" {name}" if name else "") + "\n" for name, c in rows)
        return (1 if err else 0), out, err

    def _lines_arg(self, argv: list[str]) -> tuple[int, list[str]]:
        n, rest = 10, []
        it = iter(argv)
        for a in it:
            if a == "-n":
                a = next(it, "10")
                n = int(a) if a.lstrip("-").isdigit() else 10
            elif re.fullmatch(r"-n?\d+", a):
                n = int(a.lstrip("-n"))
            else:
                rest.append(a)
        return abs(n), rest

    def _head_tail(self, argv: list[str], stdin: str | None, end: bool = False) -> tuple[int, str, str]:
        n, paths = self._lines_arg(argv)
        found, err = self._read_operands("tail" if end else "head", paths, stdin)
        out = []
        for name, text in found:
            lines = text.splitlines(keepends=True)
            part = (lines[-n:] if n else []) if end else lines[:n]
            out.append((f"==> {name} <==\n" if len(found) > 1 else "") + "".join(part))
        return (1 if err else 0), "".join(out), err

    def _head_tail_end(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        return self._head_tail(argv, stdin, end=True)

    def _echo(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        newline = not (argv and argv[0] == "-n")
        words = argv[1:] if not newline else argv
        return 0, " ".join(words) + ("\n" if newline else ""), ""

    def _pwd(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        return 0, self.root + ("/" + self.cwd if self.cwd else "") + "\n", ""

    def _cd(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        path = self._path(argv[0]) if argv else ""
        if path in self.files or not self._is_dir(path):
            return 1, "", f"cd: {argv[0]}: No such directory\n"
        self.cwd = path
        return 0, "", ""

    def _find(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        starts = []
        while argv and not argv[0].startswith("-"):
            starts.append(argv.pop(0))
        name_rx, kind, depth = None, None, None
        it = iter(argv)
        for a in it:
            value = next(it, None)
            if value is None:
                return 1, "", f"find: missing argument to '{a}'\n"
            if a in ("-name", "-iname"):
                name_rx = (value, a == "-iname")
            elif a == "-type" and value in ("f", "d"):
                kind = value
            elif a == "-maxdepth" and value.isdigit():
                depth = int(value)
            else:
                return (
                    1,
                    "",
                    f"find: unsupported predicate '{a} {value}' (supported: -name, -iname, -type f|d, -maxdepth)\n",
                )
        out, err = [], []
        for raw in starts or ["."]:
            base = self._path(raw)
            if base not in self.files and not self._is_dir(base):
                err.append(f"find: '{raw}': No such file or directory\n")
                continue
            prefix = base + "/" if base else ""
            entries = {base: "d"} if base not in self.files else {base: "f"}
            for f in self._under(base):
                parts = f[len(prefix) :].split("/") if f != base else []
                for i in range(1, len(parts)):
                    entries.setdefault(prefix + "/".join(parts[:i]), "d")
                entries[f] = "f"
            shown_base = raw.rstrip("/") or raw
            for path, k in sorted(entries.items()):
                rel = path[len(prefix) :] if path != base else ""
                level = rel.count("/") + 1 if rel else 0
                if (kind and k != kind) or (depth is not None and level > depth):
                    continue
                if name_rx is not None:
                    name = posixpath.basename(path) or shown_base
                    pat, fold = name_rx
                    if not fnmatch.fnmatchcase(name.lower() if fold else name, pat.lower() if fold else pat):
                        continue
                out.append(shown_base + ("/" + rel if rel else "") + "\n")
        return (1 if err else 0), "".join(out), "".join(err)

    def _git(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        sub, rest = (argv[0], argv[1:]) if argv else ("", [])
        call: tuple[Callable[[dict[str, Any]], tuple[Any, ResultKind]], dict[str, Any]]
        if sub == "commit":
            message = next((rest[i + 1] for i, a in enumerate(rest[:-1]) if a in ("-m", "--message")), None)
            if "-a" in rest or "-am" in rest:
                self.git_add({"paths": ["."]})
                message = message or next((rest[i + 1] for i, a in enumerate(rest[:-1]) if a == "-am"), None)
            call = (self.git_commit, {"message": message or ""})
        elif sub == "add":
            call = (self.git_add, {"paths": [a for a in rest if not a.startswith("-")] or ["."]})
        elif sub == "diff":
            paths = [a for a in rest if not a.startswith("-")]
            call = (self.git_diff, {"path": paths[0]} if paths else {})
        elif sub == "status":
            call = (self.git_status, {})
        elif sub == "log":
            n = next((int(a.lstrip("-n")) for a in rest if re.fullmatch(r"-n?\d+", a)), None)
            call = (self.git_log, {"max_count": n} if n else {})
        else:
            return 1, "", f"git: '{sub}' is not supported here (status, diff, log, add, commit)\n"
        try:
            result, _ = call[0](call[1])
        except ToolError as exc:
            return 1, "", f"git: {exc}\n"
        return 0, f"{result}\n", ""

    def _pytest(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        paths = [a for a in argv if not a.startswith("-")]
        flt = next((argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "-k"), "")
        paths = [p for p in paths if p != flt]
        text, _ = self.run_tests({"path": paths[0] if paths else "", "filter": flt})
        return (0 if text.endswith(" 0 failed") else 1), text + "\n", ""

    def _python(self, argv: list[str], stdin: str | None) -> tuple[int, str, str]:
        if argv[:2] == ["-m", "pytest"]:
            return self._pytest(argv[2:], stdin)
        return 127, "", "bash: python: only 'python -m pytest' is available in this sandbox\n"


def make_sandbox(spec: dict[str, Any]) -> VirtualSandbox:
    """The sandbox a scenario's ``sandbox`` spec describes; ValueError for a bad spec."""
    if not isinstance(spec, dict):
        raise ValueError(f"a sandbox spec is a mapping, got {type(spec).__name__}")
    return VirtualSandbox(spec)


# --- state checks: on the sandbox as the trial left it ---


def _sandbox_of(trace: Trace) -> VirtualSandbox | None:
    return trace.sandbox if isinstance(trace.sandbox, VirtualSandbox) else None


def _text(p: dict[str, Any], key: str) -> str:
    value = p.get(key)
    if not isinstance(value, str) or not value:
        raise ValueError(f"missing parameter {key!r}")
    return value


def _same(got: Any, want: Any) -> bool:
    if _num(got) and _num(want):
        return bool(got == want)
    return bool(got == want) or (isinstance(got, str) != isinstance(want, str) and str(got) == str(want))


def _state_check(
    name: str,
) -> Callable[
    [Callable[[VirtualSandbox, dict[str, Any]], tuple[bool, str]]],
    Callable[[Trace, dict[str, Any]], CheckResult],
]:
    """Register a state check; it fails with "no sandbox" on a trace without one."""

    def wrap(
        fn: Callable[[VirtualSandbox, dict[str, Any]], tuple[bool, str]],
    ) -> Callable[[Trace, dict[str, Any]], CheckResult]:
        def check(trace: Trace, p: dict[str, Any]) -> CheckResult:
            sb = _sandbox_of(trace)
            if sb is None:
                return CheckResult(name, False, "no sandbox")
            passed, detail = fn(sb, p)
            return CheckResult(name, passed, detail)

        register(name)(check)
        return check

    return wrap


@_state_check("state_file_contains")
def state_file_contains(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    """The final file matches ``pattern`` (a regex, MULTILINE)."""
    path, pattern = sb._path(_text(p, "path")), _text(p, "pattern")
    try:
        rx = re.compile(pattern, re.M)
    except re.error as exc:
        raise ValueError(f"bad regex {pattern!r}: {exc}") from None
    text = sb.files.get(path)
    if text is None:
        return False, f"{path} does not exist at the end"
    found = rx.search(text)
    if found is None:
        head = " ".join(text.split())[:80]
        return False, f"{path} does not match {pattern!r}; it holds: {head!r}"
    return True, f"{path} matches {pattern!r}: {found.group(0)[:60]!r}"


@_state_check("state_file_unchanged")
def state_file_unchanged(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    path = sb._path(_text(p, "path"))
    before, after = sb.initial_files.get(path), sb.files.get(path)
    if before == after:
        return True, f"{path} is unchanged"
    if after is None:
        return False, f"{path} was deleted"
    if before is None:
        return False, f"{path} was created"
    return False, f"{path} was changed ({len(before)} → {len(after)} chars)"


@_state_check("state_tests_pass")
def state_tests_pass(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    if not sb.tests:
        return False, "the sandbox has no tests"
    fails = [(t.name, why) for t in sb.tests if (why := sb.test_failure(t)) is not None]
    if fails:
        name, why = fails[0]
        more = f" (+{len(fails) - 1} more)" if len(fails) > 1 else ""
        return (
            False,
            f"{len(fails)} of {len(sb.tests)} tests fail on the final files: {name}: {why}{more}",
        )
    return True, f"all {len(sb.tests)} tests pass on the final files"


@_state_check("state_committed")
def state_committed(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    """A commit after the initial one whose message matches ``pattern`` (regex, any case)."""
    pattern = p.get("pattern") or ""
    if not isinstance(pattern, str):
        raise TypeError(f"pattern must be a string, got {pattern!r}")
    made = sb.commits[1:]
    if not made:
        return False, "no commit was made"
    hit = next((c for c in made if re.search(pattern, c.message, re.I)), None)
    if hit is None:
        shown = ", ".join(repr(c.message[:40]) for c in made[:3])
        return False, f"no commit message matches {pattern!r}; commits: {shown}"
    return True, f"commit {hit.sha} {hit.message[:60]!r}"


def _rows(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    table = _text(p, "table")
    rows = next((sb.db[t] for t in sb.db if t.lower() == table.lower()), None)
    if rows is None:
        raise ValueError(f"no table {table!r} in the sandbox (tables: {', '.join(sb.db)})")
    return table, rows


@_state_check("state_db_row")
def state_db_row(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    """Some row matches ``where``, and every row that does has the ``equals`` values."""
    table, rows = _rows(sb, p)
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
def state_db_unchanged(sb: VirtualSandbox, p: dict[str, Any]) -> tuple[bool, str]:
    table, rows = _rows(sb, p)
    before = next(sb.initial_db[t] for t in sb.initial_db if t.lower() == table.lower())
    if rows == before:
        return True, f"{table} is unchanged ({len(rows)} rows)"
    changed = [m for m in sb.mutations if re.search(rf"\b{re.escape(table)}\b", m, re.I)]
    via = f"; by {changed[0][:60]!r}" if changed else ""
    return False, f"{table} changed: {len(before)} rows → {len(rows)}{via}"
