"""``fetch_repo``, the one call behind ``splitserve fetch REPO``: the plan reaches the callback
before any byte moves, a dry run writes nothing, and the run carries what the command prints
(JSON, the summary line, the spec lines).  Against the local hub stand-in (tests/hubserver.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from hubserver import HubServer
from splitserve.fetch import FetchEvents, FetchOptions, FetchPlan, fetch_repo, plan_line, size_label
from splitserve.fetch._hub import HfHub
from splitserve.fetch._run import spec_model_line

REPO = "org/Tiny-GGUF"
SHARDS = {f"Q4/Tiny-Q4-0000{i}-of-00002.gguf": bytes([i]) * (3000 * i) for i in (1, 2)}


class Recorder(FetchEvents):
    def __init__(self) -> None:
        self.seen: list[tuple[str, ...]] = []

    def planned(self, plan: FetchPlan, dry_run: bool) -> None:
        self.seen.append(("planned", plan.repo_id, str(dry_run), str(plan.todo)))

    def file_started(self, path: str, size: int, resumed: int) -> None:
        self.seen.append(("started", path))

    def file_state(self, path: str, state: str, detail: str = "") -> None:
        self.seen.append((state, path))


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[HubServer]:
    with HubServer(tmp_path / "srv") as server:
        for path, data in SHARDS.items():
            server.add_file(REPO, path, data)
        server.add_file(REPO, "README.md", b"# tiny\n")
        yield server


def options(out: Path) -> FetchOptions:
    return FetchOptions(REPO, includes=["*.gguf"], dir=out, connections=2, retries=1)


def test_a_dry_run_reports_the_plan_to_the_callback_and_writes_nothing(hub: HubServer, tmp_path: Path) -> None:
    events = Recorder()
    run = fetch_repo(options(tmp_path / "out"), dry_run=True, on_event=events, hub=HfHub(hub.endpoint, token=""))
    assert events.seen == [("planned", REPO, "True", "9000")]
    assert run.result is None and not (tmp_path / "out").exists()
    assert run.as_dict() == run.plan.as_dict()
    assert [f["action"] for f in run.as_dict()["files"]] == ["new", "new"]
    assert run.summary() == plan_line(run.plan)
    assert run.summary().endswith(f"2 files, {size_label(9000)}; {size_label(9000)} to fetch into {tmp_path / 'out'}")
    assert run.spec_lines == [] and run.refetched == []


def test_a_fetch_plans_first_then_moves_the_bytes_and_carries_what_the_command_prints(
    hub: HubServer, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    events = Recorder()
    run = fetch_repo(options(out), on_event=events, hub=HfHub(hub.endpoint, token=""))
    assert events.seen[0] == ("planned", REPO, "False", "9000")
    assert {e for e in events.seen[1:] if e[0] == "started"} == {("started", p) for p in SHARDS}
    assert {e for e in events.seen[1:] if e[0] == "done"} == {("done", p) for p in SHARDS}
    for path, data in SHARDS.items():
        assert (out / path).read_bytes() == data
    assert run.result is not None
    d = json.loads(json.dumps(run.as_dict()))
    assert d == run.result.as_dict() and d["fetched_bytes"] == 9000
    assert run.summary().startswith(f"done: 2 files in {out} ({size_label(9000)} fetched in ")
    model = out / "Q4/Tiny-Q4-00001-of-00002.gguf"
    assert run.spec_lines == [spec_model_line(model)]

    again = Recorder()
    second = fetch_repo(options(out), on_event=again, hub=HfHub(hub.endpoint, token=""))
    assert again.seen[0] == ("planned", REPO, "False", "0")
    assert second.result is not None
    assert [o.status for o in second.result.outcomes] == ["skipped", "skipped"]


def test_the_spec_line_writes_the_home_folder_as_tilde() -> None:
    assert spec_model_line(Path.home() / "models" / "m.gguf") == 'model = "~/models/m.gguf"'
    assert spec_model_line(Path("/srv/m.gguf")) == 'model = "/srv/m.gguf"'


def test_size_labels() -> None:
    assert [size_label(n) for n in (17, 3 << 10, 12 << 20, 3 << 29)] == ["17 B", "3.0 KiB", "12.0 MiB", "1.5 GiB"]
