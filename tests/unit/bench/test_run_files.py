"""Run files: the id inside is the name outside; ``--set`` values read like ``--lengths``."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve._errors import UsageError
from splitserve.bench import SpeedOptions, Target, load_run, parse_set, run_path, run_speed

from .fakes import FakeServer


def test_the_run_id_is_the_file_name_the_cli_chose(tmp_path: Path) -> None:
    path = run_path(tmp_path / "runs", "speed")  # what `bench speed -o runs/` names the file
    opts = SpeedOptions(prompt_tokens=[20], gen_tokens=2, concurrency=[1], repeat=1)
    run, written = run_speed(Target(url="http://fake:1/v1"), opts, path, transport=FakeServer().transport())
    assert written == path and run.id == path.stem
    assert load_run(path).id == path.stem
    # a name of the user's own keeps a fresh id of the run's kind
    run, written = run_speed(
        Target(url="http://fake:1/v1"), opts, tmp_path / "mine.json", transport=FakeServer().transport()
    )
    assert written.name == "mine.json" and run.id.startswith("speed-") and load_run(written).id == run.id


def test_set_values_take_k_like_lengths() -> None:
    assert parse_set(["ctx=8k,64k", "ubatch=512"]) == [{"ctx": 8192, "ubatch": 512}, {"ctx": 65536, "ubatch": 512}]
    assert parse_set(["fa=on,off"]) == [{"fa": "on"}, {"fa": "off"}]
    with pytest.raises(UsageError):
        parse_set(["ubatch"])


def test_the_run_file_carries_the_figures_per_cell(tmp_path: Path) -> None:
    opts = SpeedOptions(prompt_tokens=[20, 40], gen_tokens=3, concurrency=[1, 2], repeat=1)
    _run, path = run_speed(
        Target(url="http://fake:1/v1"), opts, tmp_path / "r.json", transport=FakeServer(slots=2).transport()
    )
    summary = load_run(path).summary
    cells = {(c["prompt_target"], c["concurrency"]): c for c in summary["cells"]}
    assert set(cells) == {(20, 1), (20, 2), (40, 1), (40, 2)}
    for c in cells.values():
        assert c["errors"] == 0 and c["cache_hits"] == 0 and c["completion_tokens"] == 3
        for key in (
            "prefill_tps_server",
            "decode_tps_server",
            "ttf_chunk_ms_p50",
            "ttf_content_ms_p50",
            "itl_ms_p50",
            "itl_ms_p90",
            "itl_ms_p99",
            "e2e_ms_p50",
            "throughput_tps",
        ):
            assert c[key] is not None and c[key] > 0, key
    assert cells[(20, 2)]["n"] == 2
    assert summary["headline"]["decode_tps_server"] > 0
