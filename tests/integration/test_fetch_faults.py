"""fetch() against the local hub server, one injected fault at a time."""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hubserver import HubServer, sha256_file
from splitserve.fetch import MANIFEST, DiskSpaceError, FetchError, FetchFailed, FetchOptions, HubError
from splitserve.fetch._fetch import fetch, plan_fetch
from splitserve.fetch._hub import HfHub
from splitserve.fetch._state import partial_path, state_path
from splitserve.fetch._transfer import Events

MiB = 1 << 20
REPO = "org/Model-GGUF"
SHARDS = [f"UD-IQ4_XS/Model-UD-IQ4_XS-0000{i}-of-00002.gguf" for i in (1, 2)]


class Recorder(Events):
    def __init__(self) -> None:
        self.notes: list[str] = []
        self.states: list[tuple[str, str]] = []

    def note(self, message: str) -> None:
        self.notes.append(message)

    def file_state(self, path: str, state: str, detail: str = "") -> None:
        self.states.append((path, state))


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with HubServer(tmp_path / "srv") as server:
        for i, name in enumerate(SHARDS):
            server.add_file(REPO, name, os.urandom(12 * MiB + 12345 * i))
        server.add_file(REPO, "Model-Q8_0.gguf", os.urandom(3 * MiB))
        server.add_file(REPO, "README.md", b"# a model card\n")
        yield server


def _fetch(hub: HubServer, out: Path, events: Events | None = None, **kw: object) -> object:
    opts: dict[str, Any] = dict(
        quants=["UD-IQ4_XS"],
        includes=["README.md"],
        dir=out,
        connections=4,
        stall_timeout=1.0,
        backoff=0.05,
        part_size=2 * MiB,
    )
    opts.update(kw)
    return fetch(
        FetchOptions(REPO, **opts),
        hub=HfHub(endpoint=hub.endpoint, token=""),  # type: ignore[arg-type]
        events=events,
    )


def _assert_intact(hub: HubServer, out: Path, paths: list[str] = SHARDS) -> None:
    for p in paths:
        assert sha256_file(out / p) == hub.repos[REPO].files[p].sha256
        assert not partial_path(out / p).exists() and not state_path(out / p).exists()


def test_clean_fetch_lays_out_shards_and_writes_manifest(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = _fetch(hub, out)
    _assert_intact(hub, out)
    assert (out / "README.md").read_bytes() == b"# a model card\n"
    assert result.models == [out / SHARDS[0]]  # type: ignore[attr-defined]
    assert (out / MANIFEST).is_file()
    assert not (out / "Model-Q8_0.gguf").exists()
    size = sum(hub.repos[REPO].files[p].size for p in SHARDS)
    assert hub.bytes_served() == size  # every byte exactly once
    assert hub.auth_leaks == 0


def test_second_run_fetches_nothing(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    _fetch(hub, out)
    mark = len(hub.log)
    result = _fetch(hub, out)
    assert hub.served(since=mark) == []
    assert {o.status for o in result.outcomes} == {"skipped"}  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "kind,kw,expect",
    [
        ("drop", {"after": 700_000, "times": 3}, "connection lost"),
        ("stall", {"after": 300_000, "seconds": 4.0}, "stalled"),
        ("status", {"status": 503, "times": 2}, "HTTP 503"),
        ("status", {"status": 416}, "416"),
        ("expire", {}, "expired"),
    ],
)
def test_transient_faults_are_retried(hub: HubServer, tmp_path: Path, kind: str, kw: dict, expect: str) -> None:
    fault = hub.add_fault(kind, path=SHARDS[1], **kw)  # type: ignore[arg-type]
    rec = Recorder()
    _fetch(hub, tmp_path / "out", rec)
    assert fault.hits == fault.times
    assert any(expect in n for n in rec.notes), rec.notes
    _assert_intact(hub, tmp_path / "out")


def test_dropped_connection_refetches_only_the_lost_remainder(hub: HubServer, tmp_path: Path) -> None:
    hub.add_fault("drop", path=SHARDS[0], after=1_000_000)
    _fetch(hub, tmp_path / "out")
    size = hub.repos[REPO].files[SHARDS[0]].size
    # the bytes that reached the client before the drop are kept: nothing is served twice
    assert hub.bytes_served(SHARDS[0]) == size
    _assert_intact(hub, tmp_path / "out")


def test_expired_url_is_refreshed_from_the_hub(hub: HubServer, tmp_path: Path) -> None:
    hub.add_fault("expire", path=SHARDS[0], min_start=4 * MiB)
    _fetch(hub, tmp_path / "out")
    assert hub.resolves >= len(SHARDS) + 1  # one URL per file, and a fresh one after the 403
    assert any(s.status == 403 for s in hub.served(SHARDS[0]))
    assert hub.served(SHARDS[0])[-1].status == 206
    _assert_intact(hub, tmp_path / "out")


def test_wrong_bytes_refetch_only_that_file_and_say_so(hub: HubServer, tmp_path: Path) -> None:
    hub.add_fault("corrupt", path=SHARDS[1], after=5000)
    rec = Recorder()
    result = _fetch(hub, tmp_path / "out", rec)
    s0, s1 = (hub.repos[REPO].files[p].size for p in SHARDS)
    assert hub.bytes_served(SHARDS[0]) == s0
    assert hub.bytes_served(SHARDS[1]) == 2 * s1
    assert any("SHA-256 mismatch" in n and "re-fetching" in n for n in rec.notes)
    by_path = {o.path: o for o in result.outcomes}  # type: ignore[attr-defined]
    assert by_path[SHARDS[1]].status == "refetched" and by_path[SHARDS[0]].status == "fetched"
    _assert_intact(hub, tmp_path / "out")


def test_persistent_failure_fails_that_file_and_resumes_later(hub: HubServer, tmp_path: Path) -> None:
    hub.add_fault("status", path=SHARDS[1], status=500, times=1000, min_start=6 * MiB)
    out = tmp_path / "out"
    with pytest.raises(FetchFailed) as exc:
        _fetch(hub, out, retries=2)
    assert "HTTP 500" in str(exc.value) and "resume" in str(exc.value)
    assert (out / SHARDS[0]).is_file()  # the other file is finished and verified
    assert state_path(out / SHARDS[1]).is_file() and not (out / SHARDS[1]).exists()
    hub.faults.clear()
    mark = len(hub.log)
    _fetch(hub, out)
    size = hub.repos[REPO].files[SHARDS[1]].size
    assert 0 < hub.bytes_served(SHARDS[1], since=mark) <= size - 6 * MiB
    _assert_intact(hub, out)


def test_token_goes_to_the_hub_and_never_to_storage(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with HubServer(tmp_path / "srv", token="hf_secret") as server:
        server.add_file(REPO, "m.gguf", os.urandom(3 * MiB))
        server.add_file(REPO, "config.json", b"{}")
        monkeypatch.setenv("HF_TOKEN", "hf_secret")
        fetch(FetchOptions(REPO, dir=tmp_path / "out", connections=2), hub=HfHub(endpoint=server.endpoint))
        assert server.auth_leaks == 0
        assert (tmp_path / "out" / "config.json").read_bytes() == b"{}"
        monkeypatch.setenv("HF_TOKEN", "wrong")
        with pytest.raises(HubError, match="not found"):
            plan_fetch(FetchOptions(REPO, dir=tmp_path / "o2"), hub=HfHub(endpoint=server.endpoint))


def test_not_enough_disk_is_refused_before_any_byte(tmp_path: Path) -> None:
    huge = tmp_path / "huge.bin"
    with open(huge, "wb") as f:
        f.truncate(shutil.disk_usage(tmp_path).free + (1 << 30))  # sparse, costs nothing
    with HubServer(tmp_path / "srv") as server:
        server.add_file(REPO, "huge.gguf", huge, sha256=hashlib.sha256(b"x").hexdigest())
        with pytest.raises(DiskSpaceError, match="free"):
            fetch(FetchOptions(REPO, dir=tmp_path / "out"), hub=HfHub(endpoint=server.endpoint))
        assert server.log == []
    assert not partial_path(tmp_path / "out" / "huge.gguf").exists()


def test_idle_connections_take_over_half_of_a_big_part(tmp_path: Path) -> None:
    """One 24 MiB part and four connections: the three idle ones split it, then split again."""
    from splitserve.fetch._fetch import _identity
    from splitserve.fetch._state import Segment
    from splitserve.fetch._transfer import FileJob, Transfer, TransferOptions

    with HubServer(tmp_path / "srv") as server:
        f = server.add_file(REPO, "one.gguf", os.urandom(24 * MiB))
        server.cap_bps = 6 * MiB  # slow enough that the part is still big when workers idle
        hub = HfHub(endpoint=server.endpoint, token="")
        listing = hub.list_files(REPO)
        remote = listing.files[0]
        final = tmp_path / "out" / "one.gguf"
        final.parent.mkdir()
        job = FileJob(
            remote,
            final,
            _identity(REPO, listing.commit, remote),
            lambda: hub.resolve(REPO, listing.commit, remote.path),
            [Segment(0, remote.size)],
        )
        Transfer([job], TransferOptions(connections=4, stall_timeout=5)).run()
        assert job.status == "done", job.error
        assert sha256_file(final) == f.sha256
        starts = sorted(s.start for s in server.served("one.gguf"))
        assert len(starts) >= 4 and starts[0] == 0 and len(set(starts)) == len(starts)
        # a shrunk stream is closed early; what was in flight then is the only waste
        assert server.bytes_served("one.gguf") < f.size + len(starts) * 4 * MiB


def test_partial_of_another_commit_is_started_over(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    hub.add_fault("status", path=SHARDS[0], status=500, times=1000, min_start=4 * MiB)
    with pytest.raises(FetchFailed):
        _fetch(hub, out, retries=1)
    assert state_path(out / SHARDS[0]).is_file()
    hub.faults.clear()
    hub.repos[REPO].commit = "f" * 40  # the branch moved on: the partial is of another version
    rec = Recorder()
    mark = len(hub.log)
    _fetch(hub, out, rec)
    assert any("another version" in n for n in rec.notes)
    assert hub.bytes_served(SHARDS[0], since=mark) == hub.repos[REPO].files[SHARDS[0]].size
    _assert_intact(hub, out)


def test_one_fetch_per_folder(hub: HubServer, tmp_path: Path) -> None:
    import fcntl

    out = tmp_path / "out"
    out.mkdir()
    with open(out / ".splitserve-fetch.lock", "w") as held:
        held.write("4242\n")
        held.flush()
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(FetchError, match=r"another fetch .pid 4242."):
            _fetch(hub, out)
    assert hub.log == []
    _fetch(hub, out)  # the lock is free again
    _assert_intact(hub, out)


def test_verify_keeps_a_corrupt_shard_marked_until_it_is_fetched_again(hub: HubServer, tmp_path: Path) -> None:
    from splitserve.fetch import verify_dir
    from splitserve.fetch._verify import Manifest

    out = tmp_path / "out"
    _fetch(hub, out)
    assert verify_dir(out).ok
    victim = out / SHARDS[1]
    with open(victim, "r+b") as fh:  # flip one byte, keep size and mtime as they were
        st = victim.stat()
        fh.seek(4321)
        b = fh.read(1)
        fh.seek(4321)
        fh.write(bytes([b[0] ^ 1]))
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    for _run in range(2):  # the second run still fails: nothing forgot the corrupt shard
        report = verify_dir(out)
        assert not report.ok
        status = {i.path: i.status for i in report.items}
        assert status == {SHARDS[0]: "ok", SHARDS[1]: "hash", "README.md": "ok"}
        assert any("shard(s) 2 of 2 corrupt" in p for p in report.problems), report.problems
    manifest = Manifest.model_validate_json((out / MANIFEST).read_text())
    assert manifest.files[SHARDS[1]].corrupt and "SHA-256" in str(manifest.files[SHARDS[1]].corrupt)
    # the next fetch does not trust the manifest: it replaces exactly that shard, and clears the mark
    mark = len(hub.log)
    result = _fetch(hub, out)
    assert {s.path for s in hub.served(since=mark)} == {SHARDS[1]}
    assert {o.path: o.status for o in result.outcomes}[SHARDS[1]] != "skipped"  # type: ignore[attr-defined]
    _assert_intact(hub, out)
    report = verify_dir(out)
    assert report.ok and report.problems == []
    assert Manifest.model_validate_json((out / MANIFEST).read_text()).files[SHARDS[1]].corrupt is None


def test_files_already_on_disk_are_adopted_after_a_hash_check(hub: HubServer, tmp_path: Path) -> None:
    out = tmp_path / "out"
    for p in SHARDS:  # e.g. downloaded earlier with another tool
        (out / p).parent.mkdir(parents=True, exist_ok=True)
        (out / p).write_bytes(hub.repos[REPO].files[p].source.read_bytes())
    plan = plan_fetch(FetchOptions(REPO, quants=["UD-IQ4_XS"], dir=out), hub=HfHub(endpoint=hub.endpoint, token=""))
    assert [f.action for f in plan.files] == ["skip", "skip"] and plan.todo == 0
    assert not (out / MANIFEST).exists()  # planning writes nothing
    result = _fetch(hub, out, includes=[])
    assert hub.log == [] and (out / MANIFEST).is_file()
    assert {o.status for o in result.outcomes} == {"skipped"}  # type: ignore[attr-defined]


def test_urls_that_expire_with_time_are_renewed(tmp_path: Path) -> None:
    with HubServer(tmp_path / "srv", url_ttl=1.0) as server:  # presigned for one second only
        f = server.add_file(REPO, "slow.gguf", os.urandom(12 * MiB))
        server.cap_bps = 2 * MiB  # about three seconds on two connections
        rec = Recorder()
        fetch(
            FetchOptions(REPO, dir=tmp_path / "out", connections=2, part_size=MiB, backoff=0.05),
            hub=HfHub(endpoint=server.endpoint, token=""),
            events=rec,
        )
        assert sha256_file(tmp_path / "out" / "slow.gguf") == f.sha256
        assert server.resolves >= 2 and any(s.status == 403 for s in server.served())
        assert any("fresh URL" in n for n in rec.notes)


def test_gated_repo_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with HubServer(tmp_path / "srv", token="hf_ok") as server:
        server.add_file(REPO, "m.gguf", os.urandom(MiB))
        server.repos[REPO].gated = True
        monkeypatch.delenv("HF_TOKEN", raising=False)
        with pytest.raises(HubError, match=r"gated.*HF_TOKEN"):
            plan_fetch(FetchOptions(REPO, dir=tmp_path / "o"), hub=HfHub(endpoint=server.endpoint, token=""))
        monkeypatch.setenv("HF_TOKEN", "hf_ok")
        fetch(FetchOptions(REPO, dir=tmp_path / "o"), hub=HfHub(endpoint=server.endpoint))
        assert (tmp_path / "o" / "m.gguf").stat().st_size == MiB and server.auth_leaks == 0
