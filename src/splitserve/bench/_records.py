"""The run file: one JSON document per bench run, rewritten as records arrive.

A run holds the raw per-request records (client-side stream times next to the
server's own ``timings``), the settings it ran with, what the server reported
about itself, the engine's provenance and the machine.  :class:`RunWriter`
rewrites the file atomically after every record, so an interrupted run (Ctrl-C,
a crash) keeps everything measured up to that point and says it is incomplete.
"""

from __future__ import annotations

import json
import os
import secrets
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from .._errors import UsageError

SCHEMA_VERSION = 1

RunKind = Literal["speed", "context", "sweep", "engine"]


def utc_now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id(kind: str) -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{kind}-{stamp}-{secrets.token_hex(2)}"


def run_path(out: Path | None, kind: str, spec: Path | None = None) -> Path:
    """Where a bench command writes its run: ``out`` when it names a ``.json`` file, else a new
    run id in the folder ``out``; by default in ``bench-runs/`` beside the cluster's ``spec`` file
    (where the live page looks for the latest bench, whatever folder bench ran in), else in
    ``./bench-runs/``."""
    if out is not None and out.suffix == ".json":
        return out
    default = spec.resolve().parent / "bench-runs" if spec is not None else Path("bench-runs")
    return (out or default) / f"{new_run_id(kind)}.json"


class RequestRecord(BaseModel):
    """One request as measured: times are milliseconds from the moment it was sent."""

    id: str
    kind: str
    """``speed`` (the ``chat`` workload), ``context``, ``calibration``, or a workload: ``copy``,
    ``edit``, ``json``, ``agent`` (one record per agent turn)."""
    cell: dict[str, Any] = Field(default_factory=dict)
    """The cell of the run this request belongs to (prompt size, concurrency, length, depth...)."""
    batch: int = 0
    """Requests with the same batch number were in flight together."""
    started_at: float = 0.0
    """Wall-clock send time (Unix seconds)."""
    send_offset_ms: float = 0.0
    """Send time relative to the start of its batch."""
    ttf_chunk_ms: float | None = None
    """First SSE data chunk of any kind (a role-only chunk counts)."""
    ttf_token_ms: float | None = None
    """First chunk that carries text, reasoning or a tool call."""
    ttf_content_ms: float | None = None
    ttf_reasoning_ms: float | None = None
    e2e_ms: float | None = None
    token_times_ms: list[float] = Field(default_factory=list)
    """Arrival of every text-bearing chunk (a chunk is not always one token)."""
    n_chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    tokens_source: str = "none"
    """Where the token counts came from: ``usage``, ``timings`` or ``none``."""
    timings: dict[str, Any] | None = None
    """The server's own ``timings`` object (llama.cpp), verbatim."""
    finish_reason: str | None = None
    text: str = ""
    reasoning_chars: int = 0
    reasoning: str = ""
    """The full reasoning text, kept for workload records (their agreement compares it)."""
    tool_call_chunks: int = 0
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    """Tool calls the response made: ``{"id", "name", "arguments"}`` (arguments as streamed)."""
    status: int | None = None
    error: str | None = None
    cache_hit: bool = False
    """The server reported more cached prompt tokens than the shared template prefix."""
    draft_n: int | None = None
    """Tokens drafted by speculative decoding (llama.cpp ``timings.draft_n``); ``None``: not reported."""
    draft_accepted: int | None = None
    """Drafted tokens the model accepted (``timings.draft_n_accepted``); ``None``: not reported."""
    agreement: float | None = None
    """Longest common prefix of this output and the reference output (same prompt, no speculation),
    in characters, over the reference's length; ``None`` when there is no reference."""
    exact_match: bool | None = None
    """The output equals the reference output; ``None`` when there is no reference."""
    reference: str | None = None
    """Where the reference output came from (a run id, or a sweep point)."""
    extra: dict[str, Any] = Field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.error is None


class SweepPoint(BaseModel):
    """One point of a sweep: the setting, what the server then reported, and its requests."""

    values: dict[str, Any]
    server: dict[str, Any] = Field(default_factory=dict)
    records: list[RequestRecord] = Field(default_factory=list)
    error: str | None = None


class BenchRun(BaseModel):
    """One bench run, as written to its JSON file."""

    schema_version: int = SCHEMA_VERSION
    kind: RunKind
    id: str
    label: str = ""
    created_at: str = Field(default_factory=utc_now)
    finished_at: str | None = None
    complete: bool = False
    interrupted: bool = False
    target: dict[str, Any] = Field(default_factory=dict)
    settings: dict[str, Any] = Field(default_factory=dict)
    server: dict[str, Any] = Field(default_factory=dict)
    engine: dict[str, Any] = Field(default_factory=dict)
    machine: dict[str, Any] = Field(default_factory=dict)
    calibration: dict[str, Any] = Field(default_factory=dict)
    records: list[RequestRecord] = Field(default_factory=list)
    points: list[SweepPoint] = Field(default_factory=list)
    engine_rows: list[dict[str, Any]] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    summary: dict[str, Any] = Field(default_factory=dict)
    """Figures per cell (the report's tables: ``cells``) and the ``headline``, written when the run
    ends (also when interrupted); the records stay the source of truth."""

    @property
    def name(self) -> str:
        return self.label or self.id


class RunWriter:
    """Keeps a :class:`BenchRun` on disk, rewritten atomically after each change."""

    def __init__(self, run: BenchRun, path: Path) -> None:
        self.run = run
        self.path = path
        self._last = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)
        self.flush()

    def add(self, record: RequestRecord, point: SweepPoint | None = None) -> None:
        (point.records if point is not None else self.run.records).append(record)
        self.flush()

    def flush(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(self.run.model_dump_json(indent=1))
        os.replace(tmp, self.path)
        self._last = time.monotonic()

    def close(self, interrupted: bool = False) -> None:
        self.run.finished_at = utc_now()
        self.run.interrupted = interrupted
        self.run.complete = not interrupted
        self.flush()


def load_run(path: Path) -> BenchRun:
    """Read a run file; a missing or malformed file is a :class:`UsageError` naming it."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"{path}: no such run file") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a bench run JSON file ({exc})") from None
    try:
        return BenchRun.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise UsageError(f"{path}: not a bench run file ({where}: {first.get('msg')})") from None
