"""A shard that ``--verify`` found corrupt stays marked in the manifest until it is fetched again."""

from __future__ import annotations

import hashlib
from pathlib import Path

from splitserve.fetch._select import RemoteFile
from splitserve.fetch._verify import ManifestStore


def test_a_corrupt_mark_survives_reloads_and_is_cleared_by_a_new_record(tmp_path: Path) -> None:
    data = b"x" * 100
    target = tmp_path / "m-00001-of-00001.gguf"
    target.write_bytes(data)
    remote = RemoteFile(target.name, len(data), hashlib.sha256(data).hexdigest(), None)
    store = ManifestStore(tmp_path)
    store.record("org/m", "c" * 40, remote, target)
    assert store.matches(remote, target)
    store.mark_corrupt(target.name, "SHA-256 ab…, hub says cd…")
    reloaded = ManifestStore(tmp_path)
    assert reloaded.data.files[target.name].corrupt == "SHA-256 ab…, hub says cd…"
    assert not reloaded.matches(remote, target)  # fetch must not skip it
    reloaded.record("org/m", "c" * 40, remote, target)  # a fetch replaced (or re-hashed) it
    assert ManifestStore(tmp_path).data.files[target.name].corrupt is None
    assert ManifestStore(tmp_path).matches(remote, target)


def test_marking_an_unknown_path_changes_nothing(tmp_path: Path) -> None:
    store = ManifestStore(tmp_path)
    store.mark_corrupt("nope.gguf", "x")
    assert not store.path.exists()
