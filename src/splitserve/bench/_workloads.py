"""Workloads that look like the traffic of coding agents, and the agreement of two outputs.

``chat`` is the speed bench's random-words prompts (``_prompts``).  The others are fixed,
repeatable prompts, so that a run can be compared token for token with a reference run of
the same prompts without speculation:

- ``copy``: "copy this file back exactly", over a source file (three ship with splitserve;
  ``--workload-file`` gives your own);
- ``edit``: rewrite the file with one small change (rename a variable, change a constant);
- ``json``: echo the arguments of a tool call with a few fields changed;
- ``agent``: a recorded multi-turn tool loop (OpenAI message format with tools) replayed turn
  by turn: turn *k* sends the recorded history up to the *k*-th assistant turn (the recording's
  own assistant turns, never the model's), so each turn's prompt extends the previous one and a
  prompt cache can serve everything but the new tool result.

Every request of a run starts with a job tag that depends only on its place in the run
(workload, concurrency, repeat, position in the batch), never on chance: two runs of the same
options send the same prompts, and the record ids say which request matches which.

Agreement: greedy decoding with and without speculation should give the same text.  Of an
output and its reference (the same prompt, no speculation) the bench records
``agreement`` = longest common prefix in characters / length of the reference (1.0 when the
output starts with the whole reference) and ``exact_match`` (the two are equal).  The text
compared is the reasoning, then the content, then each tool call as ``name(arguments)``.
"""

from __future__ import annotations

import copy as _copy
import difflib
import json
import keyword
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .._errors import UsageError
from ._records import BenchRun, RequestRecord, SweepPoint

WORKLOADS = ("chat", "copy", "edit", "json", "agent")
DATA = Path(__file__).parent / "data"
SOURCES = DATA / "sources"
RECORDING = DATA / "agent_fix_durations.json"
JSON_ITEMS = DATA / "json_items.json"

DEFAULT_MAX_TOKENS = {"copy": 1024, "edit": 1024, "json": 512, "agent": 256}
"""Output cap per request of each workload when ``--gen-tokens`` is not given."""

MAX_SOURCE_BYTES = 64 * 1024

_FENCE = {
    ".py": "python",
    ".ts": "typescript",
    ".js": "javascript",
    ".go": "go",
    ".rs": "rust",
    ".c": "c",
    ".h": "c",
    ".cc": "cpp",
    ".cpp": "cpp",
    ".java": "java",
    ".rb": "ruby",
    ".sh": "bash",
    ".toml": "toml",
    ".yaml": "yaml",
    ".yml": "yaml",
    ".json": "json",
    ".md": "markdown",
    ".sql": "sql",
    ".kt": "kotlin",
    ".swift": "swift",
    ".cs": "csharp",
}

# The shipped sources' edits: (kind, old, new, instruction).
_EDITS: dict[str, list[tuple[str, str, str, str]]] = {
    "rate_limiter.py": [
        ("rename", "bucket", "entry", "Rename the local variable `bucket` to `entry` everywhere in this file."),
        ("replace", "burst: int = 10", "burst: int = 20", "Change the default of `burst` from 10 to 20."),
    ],
    "retry.ts": [
        ("rename", "opts", "settings", "Rename the variable `opts` to `settings` everywhere in this file."),
        ("replace", "attempts: 5,", "attempts: 3,", "Change the default number of attempts from 5 to 3."),
    ],
    "config_loader.go": [
        ("rename", "cfg", "conf", "Rename the variable `cfg` to `conf` everywhere in this file."),
        ("replace", "Workers:      4,", "Workers:      8,", "Change the default number of workers from 4 to 8."),
    ],
}

_NOT_NAMES = set(keyword.kwlist) | {
    "self",
    "cls",
    "this",
    "true",
    "false",
    "null",
    "nil",
    "None",
    "True",
    "False",
    "int",
    "str",
    "float",
    "bool",
    "list",
    "dict",
    "string",
    "number",
    "return",
    "func",
    "const",
    "let",
    "var",
    "function",
    "error",
    "err",
    "type",
    "interface",
    "struct",
    "package",
    "import",
    "export",
    "public",
    "private",
    "static",
    "void",
    "new",
    "fmt",
    "time",
    "json",
    "os",
    "re",
    "Any",
    "typing",
}


@dataclass(frozen=True)
class Source:
    """A text file to copy or edit."""

    name: str
    text: str
    lang: str = ""

    def fenced(self) -> str:
        text = self.text if self.text.endswith("\n") else self.text + "\n"
        return f"```{self.lang}\n{text}```"


@dataclass
class Item:
    """One prompt of a workload (for ``agent``: one conversation, replayed turn by turn)."""

    workload: str
    name: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None = None
    expected: str | None = None
    """What a faithful answer contains (the file, the edited file, the changed JSON)."""

    def turns(self, drop_reasoning: bool = False) -> list[list[dict[str, Any]]]:
        """For ``agent``: the history each turn sends (everything before its assistant message);
        for the others, the one prompt."""
        if self.workload != "agent":
            return [self.messages]
        out = []
        for i, msg in enumerate(self.messages):
            if msg.get("role") == "assistant":
                history = self.messages[:i]
                if drop_reasoning:
                    history = [_without_reasoning(m) for m in history]
                out.append(history)
        return out


@dataclass
class WorkloadPlan:
    """The items of each workload a run sends, resolved (files read) before anything is sent."""

    workloads: list[str]
    items: dict[str, list[Item]] = field(default_factory=dict)
    drop_reasoning: bool = False

    def turns_per_item(self, workload: str) -> int:
        items = self.items.get(workload) or []
        return max((len(i.turns()) for i in items), default=1) if workload == "agent" else 1

    def describe(self) -> dict[str, Any]:
        return {w: [i.name for i in self.items.get(w, [])] for w in self.workloads if w != "chat"}


def parse_workloads(text: str) -> list[str]:
    """``copy,edit`` -> ``["copy", "edit"]``; an unknown name is a :class:`UsageError`."""
    names = [w.strip().lower() for w in text.split(",") if w.strip()]
    if not names:
        raise UsageError("--workload: give one of " + ", ".join(WORKLOADS))
    for name in names:
        if name not in WORKLOADS:
            raise UsageError(
                f"--workload {name!r}: unknown workload; use one of {', '.join(WORKLOADS)} (or a comma list)"
            )
    return list(dict.fromkeys(names))


def read_source(path: Path) -> Source:
    """A user's file for ``copy``/``edit``: text, at most 64 KiB."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise UsageError(f"--workload-file {path}: no such file") from None
    except OSError as exc:
        raise UsageError(f"--workload-file {path}: cannot read it ({exc.strerror})") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise UsageError(
            f"--workload-file {path}: {len(data):,} bytes; the copy and edit workloads take "
            f"files up to {MAX_SOURCE_BYTES // 1024} KiB (the whole file is the answer)"
        )
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"--workload-file {path}: not UTF-8 text") from None
    if not text.strip():
        raise UsageError(f"--workload-file {path}: the file is empty")
    return Source(path.name, text, _FENCE.get(path.suffix.lower(), ""))


def shipped_sources() -> list[Source]:
    return [Source(p.name, p.read_text(), _FENCE.get(p.suffix, "")) for p in sorted(SOURCES.iterdir()) if p.is_file()]


def copy_items(sources: Sequence[Source]) -> list[Item]:
    return [
        Item(
            "copy",
            s.name,
            [
                {
                    "role": "user",
                    "content": f"Here is `{s.name}`:\n\n{s.fenced()}\n\nCopy this file back exactly: the same text, with no "
                    "changes and no commentary. Reply with the file only, in one code block.",
                }
            ],
            expected=s.text,
        )
        for s in sources
    ]


def edits_for(source: Source) -> list[tuple[str, str, str, str]]:
    """The shipped edits of a shipped file; for any other file, one rename and one constant change
    found in it (the most frequent plain identifier; the first number of two digits or more)."""
    if source.name in _EDITS and all(old in source.text for _k, old, _n, _i in _EDITS[source.name]):
        return _EDITS[source.name]
    out: list[tuple[str, str, str, str]] = []
    counts: dict[str, int] = {}
    for m in re.finditer(r"(?<![\w.$])[A-Za-z_][A-Za-z0-9_]{2,}\b", source.text):
        name = m.group(0)
        if name not in _NOT_NAMES:
            counts[name] = counts.get(name, 0) + 1
    names = sorted((n for n, c in counts.items() if c >= 2), key=lambda n: (-counts[n], n))
    if names:
        old = names[0]
        new = old + "_v2" if not old.isupper() else old + "_V2"
        out.append(("rename", old, new, f"Rename `{old}` to `{new}` everywhere in this file."))
    num = re.search(r"(?<![\w.])([1-9]\d+)(?![\w.])", source.text)
    if num:
        line = source.text.count("\n", 0, num.start()) + 1
        old_n = num.group(1)
        new_n = str(int(old_n) * 2)
        out.append(("number", old_n, new_n, f"On line {line}, change the number {old_n} to {new_n}."))
    if not out:
        raise UsageError(f"--workload-file {source.name}: found nothing to edit (no repeated name, no number)")
    return out


def apply_edit(text: str, kind: str, old: str, new: str) -> str:
    if kind == "rename":
        return re.sub(rf"(?<![\w$]){re.escape(old)}(?![\w$])", new, text)
    if kind == "number":
        return re.sub(rf"(?<![\w.]){re.escape(old)}(?![\w.])", new, text, count=1)
    return text.replace(old, new, 1)


def edit_items(sources: Sequence[Source]) -> list[Item]:
    items = []
    for s in sources:
        for n, (kind, old, new, instruction) in enumerate(edits_for(s)):
            items.append(
                Item(
                    "edit",
                    f"{s.name}#{kind}{n}",
                    [
                        {
                            "role": "user",
                            "content": f"Here is `{s.name}`:\n\n{s.fenced()}\n\n{instruction} Change nothing else. "
                            "Reply with the whole edited file only, in one code block.",
                        }
                    ],
                    expected=apply_edit(s.text, kind, old, new),
                )
            )
    return items


def set_path(data: Any, path: str, value: Any) -> None:
    """``a.b.0.c`` = value inside nested dicts and lists."""
    keys = path.split(".")
    for key in keys[:-1]:
        data = data[int(key)] if isinstance(data, list) else data[key]
    last = keys[-1]
    if isinstance(data, list):
        data[int(last)] = value
    else:
        data[last] = value


def json_items(path: Path = JSON_ITEMS) -> list[Item]:
    items = []
    for spec in json.loads(path.read_text()):
        args = spec["arguments"]
        changed = _copy.deepcopy(args)
        lines = []
        for where, value in spec["changes"]:
            set_path(changed, where, value)
            lines.append(f"- set `{where}` to `{json.dumps(value)}`")
        shown = json.dumps(args, indent=2, ensure_ascii=False)
        items.append(
            Item(
                "json",
                spec["name"],
                [
                    {
                        "role": "user",
                        "content": f"Here are the arguments of a call to the tool `{spec['tool']}`:\n\n```json\n{shown}\n```\n\n"
                        "Return the same JSON with these changes and every other field unchanged:\n"
                        + "\n".join(lines)
                        + "\n\nReply with the JSON only, in one code block.",
                    }
                ],
                expected=json.dumps(changed, indent=2, ensure_ascii=False),
            )
        )
    return items


def load_recording(path: Path | None = None) -> Item:
    """An agent recording: ``{"name", "tools": [...], "messages": [...]}`` in OpenAI format, with at
    least one assistant message; a malformed file is a :class:`UsageError` naming it."""
    path = path or RECORDING
    where = f"--recording {path}"
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file") from None
    except (OSError, ValueError) as exc:
        raise UsageError(f"{where}: not a JSON file ({exc})") from None
    if isinstance(data, list):
        data = {"messages": data}
    messages = data.get("messages") if isinstance(data, dict) else None
    if not isinstance(messages, list) or not all(isinstance(m, dict) and "role" in m for m in messages):
        raise UsageError(f'{where}: expected {{"messages": [{{"role": ..., ...}}, ...], "tools": [...]}}')
    if not any(m["role"] == "assistant" for m in messages):
        raise UsageError(f"{where}: the recording has no assistant turn to replay")
    if messages[0]["role"] == "assistant":
        raise UsageError(
            f"{where}: the first message is an assistant turn; a recording starts with the system or user message"
        )
    tools = data.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise UsageError(f"{where}: tools must be a list of OpenAI tool definitions")
    name = str(data.get("name") or path.stem)
    return Item("agent", name, messages, tools or None)


def build_plan(
    workloads: Sequence[str], files: Sequence[Path] = (), recording: Path | None = None, drop_reasoning: bool = False
) -> WorkloadPlan:
    """Read every file the workloads need (a bad one fails here, before any request)."""
    plan = WorkloadPlan(list(workloads), drop_reasoning=drop_reasoning)
    sources: list[Source] | None = None
    for w in workloads:
        if w in ("copy", "edit"):
            if sources is None:
                sources = [read_source(Path(f)) for f in files] or shipped_sources()
            plan.items[w] = copy_items(sources) if w == "copy" else edit_items(sources)
        elif w == "json":
            plan.items[w] = json_items()
        elif w == "agent":
            plan.items[w] = [load_recording(Path(recording) if recording else None)]
    return plan


def job_tag(workload: str, concurrency: int, repeat: int, index: int) -> str:
    return f"{workload}-c{concurrency}r{repeat}i{index}"


def tagged(messages: list[dict[str, Any]], tag: str) -> list[dict[str, Any]]:
    """``messages`` with ``Job <tag>.`` leading the first message's text (a copy)."""
    out = [dict(m) for m in messages]
    if out:
        first = out[0]
        content = first.get("content")
        if isinstance(content, str) or content is None:
            first["content"] = f"Job {tag}.\n\n{content or ''}"
        elif isinstance(content, list):
            first["content"] = [{"type": "text", "text": f"Job {tag}.\n\n"}, *content]
    return out


def _without_reasoning(msg: dict[str, Any]) -> dict[str, Any]:
    if msg.get("role") != "assistant":
        return msg
    return {k: v for k, v in msg.items() if k not in ("reasoning_content", "reasoning")}


# -- agreement ------------------------------------------------------------------------------


def comparable(rec: RequestRecord) -> str:
    """The text of an output that agreement compares: reasoning, content, then tool calls."""
    calls = "".join(f"\n{c.get('name', '')}({c.get('arguments', '')})" for c in rec.tool_calls)
    return rec.reasoning + rec.text + calls


def agreement(output: str, reference: str) -> tuple[float, bool]:
    """(longest common prefix / len(reference), output == reference); an empty reference agrees
    only with an empty output."""
    if not reference:
        return (1.0 if not output else 0.0), output == reference
    n = len(os.path.commonprefix([output, reference]))
    return n / len(reference), output == reference


def comparable_records(records: Iterable[RequestRecord]) -> dict[str, RequestRecord]:
    """Records that can serve as references, by id (calibration and context records cannot)."""
    return {r.id: r for r in records if r.ok and r.kind not in ("calibration", "context")}


def apply_reference(records: Iterable[RequestRecord], reference: Iterable[RequestRecord], label: str) -> int:
    """Fill ``agreement``/``exact_match``/``reference`` of each record that has a reference record
    of the same id; returns how many did."""
    refs = comparable_records(reference)
    n = 0
    for rec in records:
        ref = refs.get(rec.id)
        if ref is None or not rec.ok or rec.kind in ("calibration", "context"):
            continue
        rec.agreement, rec.exact_match = agreement(comparable(rec), comparable(ref))
        rec.agreement = round(rec.agreement, 6)
        rec.reference = label
        n += 1
    return n


def fidelity(rec: RequestRecord, expected: str | None) -> float | None:
    """How close the answer is to the correct one: difflib's similarity ratio (2 x matching
    characters / both lengths) of the answer's first code block and ``expected`` (1.0: the
    correct answer exactly).  A quality signal beside agreement, which compares two outputs."""
    if not expected or not rec.ok:
        return None
    body = extract_block(rec.text)
    return round(difflib.SequenceMatcher(None, body.rstrip("\n"), expected.rstrip("\n")).ratio(), 6)


def extract_block(text: str) -> str:
    """The body of the first fenced code block in ``text`` (the whole text when it has none)."""
    m = re.search(r"```[^\n]*\n(.*?)(?:```|\Z)", text, re.S)
    return m.group(1) if m else text


# -- sweep baselines -----------------------------------------------------------------------


SPECULATION_NAMES = ("speculation", "spec", "spec_type", "spec-type")
"""--set names of the speculation axis (``bench._cluster`` maps them to ``ServerSpec.speculation``)."""


def spec_key(values: dict[str, Any]) -> str | None:
    return next((k for k in values if k.lower() in SPECULATION_NAMES), None)


def is_baseline(values: dict[str, Any]) -> bool:
    key = spec_key(values)
    return key is not None and str(values[key]).strip().lower() in ("none", "off", "")


def with_baseline(points: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A speculation sweep gets its reference: for every combination of the other settings, a
    ``speculation=none`` point, placed first (added when the sweep lacks it)."""
    if not points or spec_key(points[0]) is None:
        return points
    key = spec_key(points[0])
    assert key is not None
    out: list[dict[str, Any]] = []
    seen: set[tuple[Any, ...]] = set()
    for values in points:
        rest = tuple((k, v) for k, v in values.items() if k != key)
        if rest not in seen:
            seen.add(rest)
            out.append(dict(values) | {key: "none"})
        if not is_baseline(values):
            out.append(values)
    return out


def baseline_of(run: BenchRun, point: SweepPoint) -> SweepPoint | None:
    """The ``speculation=none`` point with the same other settings (``None``: none measured, or
    ``point`` is the baseline itself, or the sweep has no speculation axis)."""
    key = spec_key(point.values)
    if key is None or is_baseline(point.values):
        return None
    rest = {k: v for k, v in point.values.items() if k != key}
    for p in run.points:
        if p is not point and is_baseline(p.values) and {k: v for k, v in p.values.items() if k != key} == rest:
            return p if p.error is None and p.records else None
    return None


def apply_baselines(run: BenchRun) -> None:
    """Agreement of every speculative point's outputs with its baseline point's."""
    for p in run.points:
        base = baseline_of(run, p)
        if base is not None:
            apply_reference(p.records, base.records, f"point {base.values}")
