"""Segments and the state file beside a partial download."""

from __future__ import annotations

import itertools
from pathlib import Path

from splitserve.fetch._state import (
    FileIdentity,
    Segment,
    load_state,
    partial_path,
    plan_segments,
    save_state,
    state_path,
    written_prefix,
)

MiB = 1 << 20


def test_plan_cuts_parts_and_tiles_the_file() -> None:
    segs = plan_segments(40000 * MiB, 16)
    assert segs[0].end - segs[0].start == 32 * MiB
    assert segs[0].start == 0 and segs[-1].end == 40000 * MiB
    assert all(a.end == b.start for a, b in itertools.pairwise(segs))


def test_smaller_file_gets_about_eight_parts_per_connection() -> None:
    assert len(plan_segments(1024 * MiB, 16)) == 128
    assert len(plan_segments(16 * MiB, 16)) == 16  # but no part below 1 MiB
    assert len(plan_segments(100, 16)) == 1
    assert plan_segments(0, 4) == []


def test_written_prefix_stops_at_first_gap() -> None:
    segs = [Segment(0, 10, 10), Segment(10, 20, 4), Segment(20, 30, 10)]
    assert written_prefix(segs) == 14
    segs[1].done = 10
    assert written_prefix(segs) == 30


def _ident(size: int) -> FileIdentity:
    return FileIdentity(repo_id="o/r", commit="c" * 40, path="m.gguf", size=size, sha256="a" * 64)


def test_state_round_trip_and_identity_check(tmp_path: Path) -> None:
    final = tmp_path / "m.gguf"
    partial_path(final).write_bytes(b"\0" * 30)
    save_state(final, _ident(30), [(0, 10, 10), (10, 30, 5)])
    assert state_path(final).name == "m.gguf.incomplete.json"
    segs = load_state(final, _ident(30))
    assert segs is not None and [(s.start, s.end, s.done) for s in segs] == [(0, 10, 10), (10, 30, 5)]
    other = _ident(30).model_copy(update={"commit": "d" * 40})
    assert load_state(final, other) is None  # another commit: start afresh


def test_state_that_does_not_tile_the_file_is_ignored(tmp_path: Path) -> None:
    final = tmp_path / "m.gguf"
    partial_path(final).write_bytes(b"\0" * 30)
    save_state(final, _ident(30), [(0, 10, 10), (12, 30, 0)])
    assert load_state(final, _ident(30)) is None
    save_state(final, _ident(30), [(0, 30, 31)])
    assert load_state(final, _ident(30)) is None


def test_state_without_its_partial_is_ignored(tmp_path: Path) -> None:
    final = tmp_path / "m.gguf"
    save_state(final, _ident(30), [(0, 30, 30)])
    assert load_state(final, _ident(30)) is None
    partial_path(final).write_bytes(b"\0" * 29)  # wrong size
    assert load_state(final, _ident(30)) is None
