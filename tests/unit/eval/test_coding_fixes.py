"""Every built-in coding bug, graded by running its tests in a real workspace: the oracle's fix
and three other correct fixes written differently pass; three wrong fixes (one ``or True``,
one in a comment, one of wrong behaviour) and an edit of the test file fail; the workspace
starts at the same commit SHA on every run.

The kinds are graded concurrently, ``PARALLEL`` at a time (each in a sandbox of its own): a
kind's test grades it together with the next kinds not graded yet (``GRADED``)."""

from __future__ import annotations

import asyncio
import os
from random import Random
from typing import Any

import pytest

from splitserve.eval._checks import run_check
from splitserve.eval._sandbox import Workspace, open_sandbox
from splitserve.eval._trace import Trace
from splitserve.eval.builtin._world import BUG_KINDS, Bug, Repo, repo

GUTTED = "def test_ok():\n    assert True\n"


def first_repo_per_kind() -> dict[int, tuple[int, Repo]]:
    found: dict[int, tuple[int, Repo]] = {}
    for seed in range(200):
        r = repo(Random(seed), 1, 1)
        found.setdefault(r.bugs[0][1].kind, (seed, r))
        if len(found) == BUG_KINDS:
            break
    return found


KINDS = first_repo_per_kind()


def fixes(bug: Bug) -> list[tuple[str, bool, tuple[str, str] | None]]:
    out: list[tuple[str, bool, tuple[str, str] | None]] = [("oracle", True, (bug.find, bug.replace))]
    out += [(f"right{i}", True, e) for i, e in enumerate(bug.right, 1)]
    out += [(f"wrong{i}", False, e) for i, e in enumerate(bug.wrong, 1)]
    return [*out, ("test_edit", False, None)]


def test_every_kind_is_covered_with_enough_fixes() -> None:
    assert sorted(KINDS) == list(range(BUG_KINDS))
    for _, r in KINDS.values():
        bug = r.bugs[0][1]
        assert len(bug.right) >= 3 and len(bug.wrong) >= 3
        assert any("or True" in new for _, new in bug.wrong), bug.fn
        assert any(new.startswith(old + "  # ") for old, new in bug.wrong), bug.fn  # the fix in a comment
        for find, _ in [(bug.find, bug.replace), *bug.right, *bug.wrong]:
            assert r.files[r.bugs[0][0]].count(find) >= 1, (bug.fn, find)


async def grade_fixes(seed: int, r: Repo) -> tuple[str, dict[str, bool]]:
    (path, bug), test_path = r.bugs[0], r.test_files[0]
    spec: dict[str, Any] = {"kind": "repo", "files": r.files, "tests": r.tests}
    params = [{"check": "state_tests_pass"}] + [{"check": "state_file_unchanged", "path": t} for t in r.test_files]
    verdicts: dict[str, bool] = {}
    async with open_sandbox() as env:
        ws = await Workspace.create(env, spec)
        sha = await ws.head()
        trace = Trace(sandbox=await ws.snapshot())
        verdicts["unfixed"] = all(run_check(trace, p).passed for p in params)
        for label, _, edit in fixes(bug):
            if edit is None:
                await ws.call("write_file", {"path": test_path, "content": GUTTED})
            else:
                text = r.files[path].replace(edit[0], edit[1], 1)
                await ws.call("write_file", {"path": path, "content": text})
            trace = Trace(sandbox=await ws.snapshot())
            verdicts[label] = all(run_check(trace, p).passed for p in params)
            for p, text in ((path, r.files[path]), (test_path, r.files[test_path])):  # back to the start
                await ws.call("write_file", {"path": p, "content": text})
    return sha, verdicts


async def first_sha(r: Repo) -> str:
    """The commit SHA a fresh workspace of ``r`` starts at."""
    async with open_sandbox() as env:
        return await (await Workspace.create(env, {"kind": "repo", "files": r.files, "tests": r.tests})).head()


PARALLEL = min(8, max(2, len(os.sched_getaffinity(0))))  # kinds graded at once
GRADED: dict[int, tuple[str, dict[str, bool]] | BaseException] = {}  # kind -> grade_fixes(...)


def graded(kind: int) -> tuple[str, dict[str, bool]]:
    if kind not in GRADED:
        batch = [kind, *[k for k in sorted(KINDS) if k != kind and k not in GRADED][: PARALLEL - 1]]

        async def go() -> list[tuple[str, dict[str, bool]] | BaseException]:
            return await asyncio.gather(*(grade_fixes(*KINDS[k]) for k in batch), return_exceptions=True)

        GRADED.update(zip(batch, asyncio.run(go()), strict=True))
    got = GRADED[kind]
    if isinstance(got, BaseException):
        raise got
    return got


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_right_fixes_pass_and_wrong_ones_fail_by_the_tests(kind: int) -> None:
    _, r = KINDS[kind]
    bug = r.bugs[0][1]
    sha, verdicts = graded(kind)
    want = {"unfixed": False} | {label: should for label, should, _ in fixes(bug)}
    assert verdicts == want, bug.fn
    again = asyncio.run(first_sha(r)) if kind == 0 else sha
    assert again == sha  # same workspace, same commit SHA
