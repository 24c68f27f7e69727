"""The speed bench's bookkeeping against a fake endpoint: calibration, unique
prompts, cache-hit flags, concurrency batches, notes, the run file."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from splitserve.bench import SpeedOptions, Target, load_run, run_speed
from splitserve.bench._records import BenchRun

from .fakes import FakeServer


def run(tmp_path: Path, fake: FakeServer, **kw: Any) -> tuple[BenchRun, Path]:
    opts = SpeedOptions(**{"prompt_tokens": [40], "gen_tokens": 4, "concurrency": [1, 3], "repeat": 2, **kw})
    target = Target(url="http://fake:1/v1")
    result, path = run_speed(target, opts, tmp_path / "run.json", transport=fake.transport())
    return result, path


def test_unique_prompts_no_cache_hits_and_every_field(tmp_path: Path) -> None:
    fake = FakeServer(slots=4)
    result, path = run(tmp_path, fake)
    speed = [r for r in result.records if r.kind == "speed"]
    assert len(speed) == 2 * (1 + 3)
    prompts = [b["messages"][0]["content"] for b in fake.bodies]
    assert len(set(prompts)) == len(prompts)  # no two requests share a prompt
    assert len({p.split()[0] for p in prompts}) == len(prompts)  # ... nor their first word
    assert not any(r.cache_hit for r in speed)
    assert all(b["ignore_eos"] and b["stream_options"] == {"include_usage": True} for b in fake.bodies)
    for r in speed:
        assert r.ok and r.completion_tokens == 4 and r.tokens_source == "usage"
        assert r.ttf_chunk_ms is not None and r.ttf_token_ms is not None and r.e2e_ms is not None
        assert len(r.token_times_ms) == 4 and r.timings and r.cached_tokens == 5
    # calibration: words -> tokens exactly (the fake counts words), prompts near 40 tokens
    assert result.calibration["tokens_per_word"] == 1.0
    assert all(r.prompt_tokens is not None and abs(r.prompt_tokens - 40) <= 2 for r in speed)
    # a concurrency-3 batch is three records with one batch number
    batches = {r.batch for r in speed if r.cell["concurrency"] == 3}
    assert len(batches) == 2
    assert result.complete and not result.interrupted
    on_disk = load_run(path)
    assert len(on_disk.records) == len(result.records) and on_disk.server["total_slots"] == 4
    assert on_disk.target["model"] == "fake-model"


def test_reused_prompt_is_flagged_as_cache_hit(tmp_path: Path) -> None:
    result, _ = run(tmp_path, FakeServer(), concurrency=[1], repeat=3, reuse_prompt=True)
    speed = [r for r in result.records if r.kind == "speed"]
    assert [r.cache_hit for r in speed] == [False, True, True]
    assert any("hit the prompt cache" in n for n in result.notes)


def test_more_concurrency_than_slots_is_noted(tmp_path: Path) -> None:
    result, _ = run(tmp_path, FakeServer(slots=1), concurrency=[2], repeat=1)
    assert any("queued" in n for n in result.notes)


def test_early_stop_is_noted(tmp_path: Path) -> None:
    result, _ = run(tmp_path, FakeServer(answer="short"), concurrency=[1], repeat=1)
    assert any("stopped before --gen-tokens" in n for n in result.notes)


def test_unreachable_endpoint_is_one_line_error(tmp_path: Path) -> None:
    import httpx
    import pytest

    from splitserve._errors import NotRunningError

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused")

    with pytest.raises(NotRunningError, match="cannot reach http://fake:1/v1"):
        run_speed(
            Target(url="http://fake:1"), SpeedOptions(), tmp_path / "r.json", transport=httpx.MockTransport(refuse)
        )
    assert not (tmp_path / "r.json").exists()  # nothing measured, no run file left behind


def test_a_server_that_rejects_every_probe_is_one_error(tmp_path: Path) -> None:
    import httpx
    import pytest

    from splitserve._errors import EngineError

    def reject(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"data": []})
        return httpx.Response(400, json={"error": {"message": "Unrecognized request argument: ignore_eos"}})

    with pytest.raises(
        EngineError,
        match="every probe request failed: HTTP 400: Unrecognized request argument: ignore_eos; pass --no-ignore-eos",
    ):
        run_speed(
            Target(url="http://fake:1"), SpeedOptions(), tmp_path / "r.json", transport=httpx.MockTransport(reject)
        )
