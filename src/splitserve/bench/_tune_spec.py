"""``splitserve tune``'s best spec: a small TOML writer (:func:`toml_value`, :func:`dump_toml`),
in-place key edits that keep the user's comments (:func:`set_key`), the [server] changes of the best
point (:func:`spec_changes`) and the tuned spec file itself (:func:`write_best_spec`)."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ._tune_search import SearchResult
from ._tune_space import KV, LLAMA_DEFAULTS, point_label, spec_value

# -- the best spec ----------------------------------------------------------------------------


def toml_value(value: Any) -> str:
    """A TOML value for a Python one (strings as basic strings, lists inline, dicts as inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, Path):
        value = str(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"no TOML for {value!r}")


def _key(k: str) -> str:
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def dump_toml(data: dict[str, Any]) -> str:
    """A whole document: plain keys first, then tables (``[a]``, ``[a.b]``) and arrays of tables."""
    lines: list[str] = []

    def emit(table: dict[str, Any], prefix: str) -> None:
        plain = {k: v for k, v in table.items() if not _is_table(v) and not _is_aot(v)}
        for k, v in plain.items():
            lines.append(f"{_key(k)} = {toml_value(v)}")
        for k, v in table.items():
            name = f"{prefix}{_key(k)}"
            if _is_table(v):
                lines.extend(["", f"[{name}]"])
                emit(v, name + ".")
            elif _is_aot(v):
                for item in v:
                    lines.extend(["", f"[[{name}]]"])
                    emit(item, name + ".")

    emit(data, "")
    return "\n".join(lines).lstrip("\n") + "\n"


def _is_table(v: Any) -> bool:
    return isinstance(v, dict)


def _is_aot(v: Any) -> bool:
    return isinstance(v, list) and bool(v) and all(isinstance(x, dict) for x in v)


_HEADER = re.compile(r"^\s*\[(\[?)\s*([^\]\[]+?)\s*\]\]?\s*(#.*)?$")


def _sections(lines: list[str]) -> list[tuple[str | None, int, int]]:
    """(table name or None for the top, first line after the header, end) per section; arrays
    of tables are named ``[[name]]``."""
    out: list[tuple[str | None, int, int]] = []
    name: str | None = None
    begin = 0
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m:
            out.append((name, begin, i))
            name = (f"[[{m.group(2)}]]" if m.group(1) else m.group(2)).replace(" ", "")
            begin = i + 1
    out.append((name, begin, len(lines)))
    return out


def _value_extent(lines: list[str], i: int) -> tuple[int, str]:
    """The lines ``key = value`` at ``i`` spans (a multi-line array) and its trailing comment."""
    for j in range(i, min(len(lines), i + 200)):
        chunk = "\n".join(lines[i : j + 1])
        try:
            tomllib.loads(chunk)
        except tomllib.TOMLDecodeError:
            continue
        comment = ""
        last = lines[j]
        for pos in [p for p, c in enumerate(last) if c == "#"]:
            try:
                tomllib.loads("\n".join(lines[i:j] + [last[:pos]]))
            except tomllib.TOMLDecodeError:
                continue
            comment = last[pos:]
            break
        return j + 1, comment
    return i + 1, ""


def set_key(lines: list[str], table: str | None, key: str, value: str | None, note: str = "") -> list[str]:
    """``lines`` with ``key`` of ``table`` set to the TOML text ``value`` (None: commented out),
    the key's own comment kept; a missing key goes after the table's last key, a missing table at
    the end."""
    lines = list(lines)
    key_re = re.compile(rf"^\s*{re.escape(key)}\s*=")
    for name, begin, end in _sections(lines):
        if name != table:
            continue
        for i in range(begin, end):
            if key_re.match(lines[i]):
                stop, comment = _value_extent(lines, i)
                if value is None:
                    lines[i:stop] = [f"# {ln}" for ln in lines[i:stop]]
                    lines[i] += f"  # {note}" if note else ""
                else:
                    indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
                    lines[i:stop] = [f"{indent}{key} = {value}" + (f"  {comment}" if comment else "")]
                return lines
        if value is None:
            return lines
        last = begin - 1
        for i in range(begin, end):
            if lines[i].strip() and not lines[i].lstrip().startswith("#"):
                last = i
        if last >= begin:
            last = _value_extent(lines, last)[0] - 1 if "=" in lines[last] else last
        lines.insert(last + 1, f"{key} = {value}" + (f"  # {note}" if note else ""))
        return lines
    if value is None:
        return lines
    if table is None:
        return [f"{key} = {value}"] + lines
    while lines and not lines[-1].strip():
        lines.pop()
    return lines + ["", f"[{table}]", f"{key} = {value}" + (f"  # {note}" if note else "")]


PATH_KEYS: tuple[tuple[str | None, str], ...] = (
    (None, "model"),
    (None, "state_dir"),
    ("server", "chat_template_file"),
    ("server", "draft_model"),
    ("gateway", "chat_template_file"),
    ("gateway", "keys_file"),
    ("ssh", "config"),
)
"""Keys whose relative paths resolve against the spec's folder."""


def spec_changes(server: Any, best: dict[str, Any]) -> dict[str, Any]:
    """The [server] keys to write: the best point's values where they differ from what the spec
    runs with (``kv`` as both cache types; None: take the key out, llama.cpp's default).  An option
    whose llama.cpp default is not known here (``threads``) is written whenever the spec leaves it out."""
    changes: dict[str, Any] = {}
    for axis, value in best.items():
        if axis == KV:
            for k in ("cache_type_k", "cache_type_v"):
                if (getattr(server, k) or "f16") != value:
                    changes[k] = value
        elif axis == "speculation":
            if spec_value(server, axis) != value:
                changes[axis] = value.split("+") if "+" in str(value) else value
        elif value is None:
            if getattr(server, axis, None) is not None:
                changes[axis] = None
        else:
            current = getattr(server, axis, None)
            effective = current if current is not None else LLAMA_DEFAULTS.get(axis)
            if effective != value:
                changes[axis] = value
    return changes


def tuned_spec_text(
    text: str,
    changes: dict[str, Any],
    header: Sequence[str] = (),
    spec_dir: Path | None = None,
    out_dir: Path | None = None,
) -> str:
    """The user's spec ``text`` with ``changes`` in [server], its other keys and comments kept.

    Relative paths are made absolute when the file moves to another folder.  If the text cannot
    be edited in place (an inline ``server = {...}`` table, ...), the document is written anew
    from its data (comments lost)."""
    data = tomllib.loads(text)
    expected = json.loads(json.dumps(data))
    lines = text.splitlines()
    moved = spec_dir is not None and out_dir is not None and spec_dir.resolve() != out_dir.resolve()
    for table, key in PATH_KEYS if moved else ():
        holder = data if table is None else data.get(table)
        if not isinstance(holder, dict) or not isinstance(holder.get(key), str):
            continue
        raw: str = holder[key]
        if raw.startswith(("/", "~")):
            continue
        assert spec_dir is not None  # moved: both folders given
        absolute = str((spec_dir / raw).resolve())
        lines = set_key(lines, table, key, toml_value(absolute))
        (expected if table is None else expected[table])[key] = absolute
    server = expected.setdefault("server", {})
    for key, value in changes.items():
        if value is None:
            old = server.pop(key, None)
            lines = set_key(lines, "server", key, None, f"splitserve tune: llama.cpp's default won over {old}")
        else:
            server[key] = value
            lines = set_key(lines, "server", key, toml_value(value), "splitserve tune")
    body = "\n".join(lines) + "\n"
    try:
        ok = tomllib.loads(body) == expected
    except tomllib.TOMLDecodeError:
        ok = False
    if not ok:
        body = dump_toml(expected)
    return "".join(f"# {h}\n" for h in header) + body


def write_best_spec(
    spec: Any, result: SearchResult, path: Path, run_path: Path | None = None, workload: str = "chat"
) -> tuple[Path, dict[str, Any]]:
    """The user's spec with the best point's [server] values, next to the run; returns the file
    and the keys changed.  The file is checked to load as a valid spec."""
    from ..cluster import load_spec

    assert result.best is not None and spec.source_file is not None
    src = Path(spec.source_file)
    changes = spec_changes(spec.server, result.best)
    bm, sm = result.best_measurement, result.start_measurement()
    m = result.metric
    head = [f"tuned by `splitserve tune` ({result.mode}, workload {workload}, metric {m.label}) from {src}"]
    if bm is not None and bm.score is not None:
        vs = f" vs {sm.score:,.2f} at the start" if sm is not None and sm.score is not None else ""
        head.append(
            f"best {point_label(result.best)}: {bm.score:,.2f} {m.unit}{vs}; "
            f"{result.runs} run(s), grid of {result.grid_size} points"
        )
    head.append(
        "changed in [server]: "
        + (
            ", ".join(f"{k} = {toml_value(v) if v is not None else '(default)'}" for k, v in changes.items())
            or "nothing (the spec's own settings were best)"
        )
    )
    if run_path is not None:
        head.append(f"every point: {run_path}")
    text = tuned_spec_text(src.read_text(), changes, head, src.parent, path.parent)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    load_spec(path)  # a SpecError here is a bug of the writer, said in one line
    return path, changes
