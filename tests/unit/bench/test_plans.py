"""Command lines and grids as data: llama-bench argv, sweep points, --set validation."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve._errors import UsageError
from splitserve.bench import EngineBenchOptions, parse_set
from splitserve.bench._cluster import with_server
from splitserve.bench._llamabench import bench_test_label, count_tests, llama_bench_argv
from splitserve.cluster import parse_spec


def test_llama_bench_argv() -> None:
    opts = EngineBenchOptions(
        prompt_tokens=[512, 4096], gen_tokens=[128], ubatch=[512, 1024], repetitions=2, flash_attn="on"
    )
    argv = llama_bench_argv(Path("/e/llama-bench"), Path("/m.gguf"), ["127.0.0.1:5001", "127.0.0.1:5002"], opts)
    assert argv == [
        "/e/llama-bench",
        "-m",
        "/m.gguf",
        "-o",
        "jsonl",
        "-r",
        "2",
        "-ngl",
        "999",
        "--rpc",
        "127.0.0.1:5001,127.0.0.1:5002",
        "-p",
        "512,4096",
        "-n",
        "128",
        "-ub",
        "512,1024",
        "-fa",
        "1",
    ]
    assert count_tests(opts) == 6


def test_test_names_follow_llama_bench() -> None:
    assert bench_test_label({"n_prompt": 512, "n_gen": 0, "n_depth": 0}) == "pp512"
    assert bench_test_label({"n_prompt": 0, "n_gen": 128, "n_depth": 4096}) == "tg128 @ d4096"


def test_parse_set_makes_a_grid() -> None:
    assert parse_set(["ubatch=512,1024", "fa=on,off"]) == [
        {"ubatch": 512, "fa": "on"},
        {"ubatch": 512, "fa": "off"},
        {"ubatch": 1024, "fa": "on"},
        {"ubatch": 1024, "fa": "off"},
    ]
    for bad in (["ubatch"], ["=1"], []):
        with pytest.raises(UsageError):
            parse_set(bad)


def spec() -> object:
    return parse_spec(
        {"model": "/m.gguf", "workers": [{"name": "w1", "port": 50100}], "server": {"ubatch": 256, "ctx_size": 2048}}
    )


def test_with_server_changes_a_copy() -> None:
    base = spec()
    point = with_server(base, {"ubatch": 1024, "ctx": 8192})  # type: ignore[arg-type]
    assert (point.server.ubatch, point.server.ctx_size) == (1024, 8192)
    assert (base.server.ubatch, base.server.ctx_size) == (256, 2048)  # type: ignore[attr-defined]


def test_with_server_rejects_unknown_and_invalid() -> None:
    with pytest.raises(UsageError, match="unknown server option"):
        with_server(spec(), {"nonsense": 1})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--set ubatch"):
        with_server(spec(), {"ubatch": "big"})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--set flash_attn"):
        with_server(spec(), {"fa": "maybe"})  # type: ignore[arg-type]


def test_effective_settings_from_the_head_log() -> None:
    from splitserve.bench._cluster import effective_settings

    log = (
        "0.01.131.688 I llama_context: n_ctx                 = 1280\n"
        "0.01.131.690 I llama_context: n_ubatch              = 512\n"
        "0.01.131.693 I llama_context: flash_attn            = enabled\n"
        "0.01.131.707 I llama_context: n_ctx_seq (1280) < n_ctx_train (8192) -- the full capacity\n"
    )
    assert effective_settings(log) == {"n_ctx": 1280, "n_ubatch": 512, "flash_attn": "enabled"}
