"""Speculative decoding over RPC with the real engine: SmolLM2 with all its layers on one loopback
RPC worker copies a ~1 kB text back (greedy, fixed seed).  With each draftless type the output is
the output without speculation, and the engine drafted (``timings.draft_n`` > 0); `status` and the
gateway's /metrics count the drafts.

    SPLITSERVE_SPEC_REPORT=out.json pytest -s tests/integration/test_speculation.py  # keeps the figures
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import free_ports
from splitserve.cluster import cluster_status, down, load_spec, up

pytestmark = [pytest.mark.engine]

TEXT = (
    "The head runs llama-server and the workers run ggml-rpc-server. Each token of decode passes through "
    "every worker once, so the link between the boxes adds its latency to every token. Speculative decoding "
    "drafts several tokens at once and verifies them in one pass, so accepted tokens come nearly free over the "
    "link. The draftless types draft from n-grams of the context: when the answer repeats the prompt, as it "
    "does when a coding agent rewrites a file, most drafted tokens are accepted. A draft model needs the same "
    "vocabulary as the main model, and its weights live on the head. MTP heads are layers of the model itself "
    "that predict the next token after the next one; only some models ship them. The planner says which types "
    "a model supports, and up refuses a type the model cannot use before anything starts. The status command "
    "shows how many tokens were drafted and how many were accepted, and the gateway's metrics show the same "
    "counters for every response it relays. MiniMax-M3 runs its sparse attention only with flash attention on "
    "and without a unified KV cache across several slots; otherwise it falls back to dense attention, and the "
    "load log says so."
)

PROMPT = "<|im_start|>user\nRepeat the following text word for word:\n\n" + TEXT + "<|im_end|>\n<|im_start|>assistant\n"
N_PREDICT = 320
TYPES = ["ngram-simple", "ngram-mod", "ngram-map-k"]


def one_worker_spec(tmp_path: Path, model: Path, name: str, speculation: str | None) -> Path:
    """All of SmolLM2's layers on one loopback RPC worker, llama-server in front, no gateway
    except for the last type (its /metrics is checked)."""
    w1, head, gw = free_ports(3)
    lines = [
        f'name = "{name}"',
        f'model = "{model}"',
        "",
        "[[workers]]",
        'name = "w1"',
        f"port = {w1}",
        "",
        "[server]",
        f"port = {head}",
        "ctx_size = 2048",
        "threads = 2",
    ]
    if speculation:
        lines.append(f'speculation = "{speculation}"')
    lines += ["", "[gateway]", f"enabled = {'true' if speculation == TYPES[-1] else 'false'}", f"port = {gw}"]
    path = tmp_path / f"{name}.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def copy_back(url: str) -> dict[str, Any]:
    body = {"prompt": PROMPT, "n_predict": N_PREDICT, "temperature": 0.0, "top_k": 1, "seed": 7, "cache_prompt": False}
    resp = httpx.post(f"{url}/completion", json=body, timeout=600)
    resp.raise_for_status()
    data: dict[str, Any] = resp.json()
    return data


def test_each_draftless_type_gives_the_same_greedy_text_and_drafts(  # type: ignore[no-untyped-def]
    engine, smollm2, state_home, tmp_path: Path
) -> None:
    runs: dict[str, dict[str, Any]] = {}
    for spec_type in [None, *TYPES]:
        name = (spec_type or "none").replace("-", "")
        spec = load_spec(one_worker_spec(tmp_path, smollm2, name, spec_type))
        state = up(spec, engine=engine)
        try:
            out = copy_back(state.engine_url)
            extra: dict[str, Any] = {}
            if spec_type:
                status = cluster_status(state_home / name)
                extra["status"] = status["speculation"]
                extra["warnings"] = status["warnings"]
            if spec_type == TYPES[-1]:
                chat = httpx.post(
                    f"{state.endpoint}/v1/chat/completions",
                    timeout=600,
                    json={
                        "messages": [
                            {"role": "user", "content": "Repeat the following text word for word:\n\n" + TEXT}
                        ],
                        "max_tokens": 64,
                        "temperature": 0,
                    },
                )
                assert chat.status_code == 200, chat.text
                extra["chat_timings"] = chat.json().get("timings")
                extra["metrics"] = httpx.get(f"{state.endpoint}/metrics", timeout=10).text
        finally:
            down(spec)
        t = out["timings"]
        runs[spec_type or "none"] = {"content": out["content"], "timings": t, **extra}
        print(
            f"\n{spec_type or 'none':13s} decode {t['predicted_per_second']:6.1f} t/s, {t['predicted_n']} tokens, "
            f"drafted {t.get('draft_n', 0)}, accepted {t.get('draft_n_accepted', 0)}"
        )

    base = runs["none"]
    assert base["timings"]["predicted_n"] >= 150, "the copy is long enough to draft from"
    assert "Speculative decoding drafts several tokens" in base["content"], "the model copies the text"
    assert "draft_n" not in base["timings"]
    for spec_type in TYPES:
        run = runs[spec_type]
        assert run["content"] == base["content"], f"{spec_type}: greedy output differs from no speculation"
        assert run["timings"]["draft_n"] > 0, f"{spec_type}: nothing was drafted"
        assert 0 < run["timings"]["draft_n_accepted"] <= run["timings"]["draft_n"]
        # status reads llama-server's own counters (up adds --metrics when speculation is on)
        st = run["status"]
        assert st["types"] == [spec_type] and st["drafted"] >= run["timings"]["draft_n"]
        assert st["accepted"] >= run["timings"]["draft_n_accepted"] and 0 < st["acceptance_rate"] <= 1
        assert run["warnings"] == []
    last = runs[TYPES[-1]]
    drafted = last["chat_timings"].get("draft_n", 0) if last["chat_timings"] else 0
    assert f"splitserve_draft_tokens_total {float(drafted)}" in last["metrics"]

    report = os.environ.get("SPLITSERVE_SPEC_REPORT")
    if report:
        Path(report).write_text(
            json.dumps({k: {"timings": v["timings"], "status": v.get("status")} for k, v in runs.items()}, indent=2)
            + "\n"
        )
