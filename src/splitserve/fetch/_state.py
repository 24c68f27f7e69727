"""The partial file and the state file beside it: which byte ranges are already on disk.

A download writes ``NAME.incomplete`` (sparse, full size) and keeps ``NAME.incomplete.json``
next to it: the file's identity (repo, commit, path, size, sha256) and its *segments*, each
``[start, end, done]`` (``done`` bytes from ``start`` are written).  The state is only ever
written after the data it describes has been written, and replaced atomically (temp file +
rename), so a ``kill -9`` at any moment leaves a state that is true: a resumed download
refetches at most what was in flight since the last save.  Segments may be split while in
flight (an idle connection takes half of a busy one's remainder), so they are a list.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ValidationError

STATE_VERSION = 1
MiB = 1 << 20
PART_SIZE = 32 * MiB  # the unit of work and of resume
MIN_PART = 1 * MiB


@dataclass
class Segment:
    """Bytes ``[start, end)`` of a file; ``done`` of them, from ``start``, are on disk."""

    start: int
    end: int
    done: int = 0
    active: bool = False  # a connection is working on it (never persisted)

    @property
    def pos(self) -> int:
        return self.start + self.done

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    @property
    def finished(self) -> bool:
        return self.pos >= self.end


def plan_segments(size: int, connections: int, part_size: int = PART_SIZE) -> list[Segment]:
    """Cut ``size`` bytes into parts: ``part_size`` at most, and about eight per connection.

    Parts are taken in order, so the ranges in flight stay close together and the trailing
    hasher is never more than about ``connections`` parts behind the last byte received.
    """
    if size <= 0:
        return []
    per_conn = -(-size // (8 * max(1, connections)))
    part = max(MIN_PART, min(part_size, per_conn))
    return [Segment(s, min(size, s + part)) for s in range(0, size, part)]


def done_bytes(segments: list[Segment]) -> int:
    return sum(s.done for s in segments)


def written_prefix(segments: list[Segment]) -> int:
    """How many bytes from offset 0 are on disk without a gap (segments tile the file)."""
    cur = 0
    for s in sorted(segments, key=lambda s: s.start):
        if s.start > cur:
            break
        cur = max(cur, s.pos)
        if not s.finished:
            break
    return cur


class FileIdentity(BaseModel):
    """What a partial file is a part of; a state with another identity is discarded."""

    repo_id: str
    commit: str
    path: str
    size: int
    sha256: str | None = None
    blob_id: str | None = None


class StateFile(BaseModel):
    version: int = STATE_VERSION
    file: FileIdentity
    segments: list[tuple[int, int, int]]


def partial_path(final: Path) -> Path:
    return final.with_name(final.name + ".incomplete")


def state_path(final: Path) -> Path:
    return final.with_name(final.name + ".incomplete.json")


def load_state(final: Path, identity: FileIdentity) -> list[Segment] | None:
    """The segments of a partial download of this very file, or None to start afresh."""
    sp, pp = state_path(final), partial_path(final)
    if not sp.is_file() or not pp.is_file():
        return None
    try:
        state = StateFile.model_validate_json(sp.read_text())
    except (ValidationError, ValueError, OSError):
        return None
    if state.version != STATE_VERSION or state.file != identity:
        return None
    if pp.stat().st_size != identity.size:
        return None
    segs = [Segment(s, e, d) for s, e, d in state.segments]
    # the segments must tile [0, size) exactly, with sane progress
    cur = 0
    for seg in sorted(segs, key=lambda s: s.start):
        if seg.start != cur or seg.end <= seg.start or not 0 <= seg.done <= seg.end - seg.start:
            return None
        cur = seg.end
    if cur != identity.size:
        return None
    return sorted(segs, key=lambda s: s.start)


def save_state(final: Path, identity: FileIdentity, segments: list[tuple[int, int, int]]) -> None:
    """Replace the state file atomically (the data it describes must already be written)."""
    sp = state_path(final)
    tmp = sp.with_name(sp.name + ".tmp")
    data = StateFile(file=identity, segments=segments).model_dump_json()
    with open(tmp, "w") as f:
        f.write(data)
    os.replace(tmp, sp)


def read_state_segments(final: Path) -> list[tuple[int, int, int]]:
    """The raw segments of a state file (for tests and ``--verify``); empty if none."""
    try:
        return [tuple(s) for s in json.loads(state_path(final).read_text())["segments"]]
    except (OSError, ValueError, KeyError):
        return []


def remove_state(final: Path) -> None:
    for p in (state_path(final), partial_path(final)):
        try:
            p.unlink()
        except FileNotFoundError:
            pass
