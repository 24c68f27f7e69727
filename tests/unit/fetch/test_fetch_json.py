"""The shapes ``fetch --json`` prints come from the library's values (``FetchPlan.as_dict``,
``FetchResult.as_dict``, ``VerifyReport.as_dict``), so a script reads the same keys the command
prints; the command only dumps them."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from splitserve.fetch import FetchPlan, verify_dir
from splitserve.fetch._fetch import FetchResult, FileOutcome, PlannedFile
from splitserve.fetch._select import RemoteFile, ShardSet
from splitserve.fetch._verify import ManifestStore

SHARDS = [RemoteFile(f"Q4/m-0000{i}-of-00002.gguf", 100 * i, sha256=f"{i}" * 64) for i in (1, 2)]


def plan(root: Path) -> FetchPlan:
    files = [
        PlannedFile(SHARDS[0], root / SHARDS[0].path, "skip", have=100),
        PlannedFile(SHARDS[1], root / SHARDS[1].path, "resume", have=50),
    ]
    return FetchPlan("org/m-GGUF", "main", "c" * 40, root, files, [ShardSet("Q4", "m", 2, list(SHARDS))])


def test_the_dry_run_json_lists_each_file_with_its_action(tmp_path: Path) -> None:
    d = json.loads(json.dumps(plan(tmp_path).as_dict()))
    assert d == {
        "repo_id": "org/m-GGUF",
        "commit": "c" * 40,
        "dir": str(tmp_path),
        "total": 300,
        "todo": 150,
        "files": [
            {"path": "Q4/m-00001-of-00002.gguf", "size": 100, "action": "skip", "have": 100},
            {"path": "Q4/m-00002-of-00002.gguf", "size": 200, "action": "resume", "have": 50},
        ],
    }


def test_the_result_json_has_the_figures_each_outcome_and_the_model_to_load(tmp_path: Path) -> None:
    outcomes = [FileOutcome(SHARDS[0].path, 100, "skipped"), FileOutcome(SHARDS[1].path, 200, "refetched", "hash")]
    result = FetchResult(plan(tmp_path), outcomes, 1.23456, 150, transfer_seconds=0.5, moved_bytes=170)
    d = json.loads(json.dumps(result.as_dict()))
    assert d["seconds"] == 1.235 and d["transfer_seconds"] == 0.5
    assert (d["fetched_bytes"], d["moved_bytes"]) == (150, 170)
    assert d["files"][1] == {"path": SHARDS[1].path, "size": 200, "status": "refetched", "message": "hash"}
    assert d["models"] == [str(tmp_path / "Q4/m-00001-of-00002.gguf")]


def test_the_verify_json_has_each_files_status(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    for name in ("a.bin", "b.bin"):
        data = name.encode() * 5
        (tmp_path / name).write_bytes(data)
        store.record("org/r", "c" * 40, RemoteFile(name, len(data), hashlib.sha256(data).hexdigest()), tmp_path / name)
    (tmp_path / "b.bin").unlink()
    d = json.loads(json.dumps(verify_dir(tmp_path).as_dict()))
    assert d == {
        "dir": str(tmp_path),
        "ok": False,
        "problems": [],
        "files": [
            {"path": "a.bin", "size": 25, "status": "ok", "detail": ""},
            {"path": "b.bin", "size": 25, "status": "missing", "detail": "not on disk"},
        ],
    }
