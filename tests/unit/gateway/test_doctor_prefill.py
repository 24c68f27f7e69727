"""The doctor's llama-server modes (prefill, raw) and its error reporting (pure, no engine)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from splitserve._errors import SplitserveError
from splitserve.chat import parse_complete
from splitserve.cli import _gateway  # noqa: F401  (registers the commands)
from splitserve.cli._app import app
from splitserve.engine import resolve_source
from splitserve.gateway._doctor import (
    CASES,
    Check,
    Report,
    _error_body,
    _grade,
    _keep_raw,
    prefill_case,
    prefill_message,
    probe_tools,
    report_markdown,
)

BY_NAME = {c.name: c for c in CASES}
HYBRID = Path(__file__).parents[3] / "docs/doctor/templates/minimax-m3-hybrid.jinja"
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def m3() -> str:
    return (resolve_source(None).path / "models/templates/MiniMax-M3.jinja").read_text()


def test_prefill_case_keeps_one_call_when_parallel_calls_are_off() -> None:
    case = prefill_case(BY_NAME["no_parallel"])
    assert [c["function"]["arguments"] for c in case.expected["tool_calls"]] == ['{"location": "Paris"}']
    assert case.extra == {"parallel_tool_calls": False}
    assert len(BY_NAME["no_parallel"].expected["tool_calls"]) == 2  # the original is untouched
    assert prefill_case(BY_NAME["parallel"]) is BY_NAME["parallel"]


def test_hybrid_prefill_splits_reasoning_off_and_keeps_the_call_text() -> None:
    template = HYBRID.read_text()
    single = prefill_message(template, BY_NAME["single"])
    assert single["role"] == "assistant" and "reasoning_content" not in single
    assert "</mm:think>" not in single["content"]  # llama-server writes the reasoning block
    assert single["content"].startswith('\n<minimax:tool_call>\n<invoke name="get_weather">')
    parsed = parse_complete("minimax-m3-hybrid", single["content"])
    assert [c["function"]["name"] for c in parsed.tool_calls] == ["get_weather"]
    reasoning = prefill_message(template, BY_NAME["reasoning"])
    assert reasoning == {
        "role": "assistant",
        "content": "391",
        "reasoning_content": "17 * 23 = 17 * 20 + 17 * 3 = 340 + 51.",
    }
    one = prefill_message(template, BY_NAME["no_parallel"])["content"]
    assert one.count("<invoke ") == 1


def test_m3_prefill_keeps_the_namespace_tokens() -> None:
    msg = prefill_message(m3(), BY_NAME["parallel"])
    assert msg["content"].startswith("]<]minimax[>[<tool_call>")
    parsed = parse_complete("minimax-m3", msg["content"])
    assert len(parsed.tool_calls) == 2 and not parsed.content


def test_prefill_of_a_template_without_reasoning_is_the_reply_as_is() -> None:
    msg = prefill_message(CHATML, BY_NAME["none"])
    assert msg == {"role": "assistant", "content": "I cannot look that up right now."}


def test_an_answer_cut_off_at_max_tokens_is_not_a_pass() -> None:
    # a tiny model echoing its tool prompt until max_tokens once passed "multi_turn" and "none"
    for name in ("multi_turn", "none", "reasoning"):
        check = Check(name)
        _grade(BY_NAME[name], {"content": "# Tools\nYou may call", "reasoning_content": "x"}, "length", check)
        assert check.status == "fail" and "finish_reason=length" in check.detail
    done = Check("none")
    _grade(BY_NAME["none"], {"content": "I cannot look that up."}, "stop", done)
    assert done.status == "pass"


def test_raw_text_and_chat_format_are_kept_from_the_verbose_field() -> None:
    check = Check("single", got={"content": "hi", "tool_calls": []})
    _keep_raw(
        {
            "choices": [],
            "__verbose": {"content": "</mm:think>hi", "generation_settings": {"chat_format": "peg-native"}},
        },
        check,
    )
    assert check.got["raw"] == "</mm:think>hi" and check.got["chat_format"] == "peg-native"
    plain = Check("single", got={"content": "hi"})
    _keep_raw({"choices": []}, plain)
    assert plain.got == {"content": "hi"}


def test_an_error_reply_is_kept_as_what_came_back() -> None:
    assert _error_body('{"error": {"code": 500}}') == {"error": {"code": 500}}
    assert _error_body("Internal Server Error") == "Internal Server Error"
    report = Report(
        "http://x/v1",
        "m",
        forced=True,
        mode="prefill",
        checks=[Check("parallel", detail="HTTP 500: ...", http_status=500, got={"error": {"error": {"code": 500}}})],
    )
    text = report_markdown(report)
    assert "llama-server's own parser reads it" in text and '"code": 500' in text
    assert report.to_json()["mode"] == "prefill" and report.to_json()["failed"] == 1


def test_the_two_forcing_modes_exclude_each_other() -> None:
    with pytest.raises(SplitserveError, match="exclude each other"):
        probe_tools("http://127.0.0.1:1", force_template=CHATML, prefill_template=CHATML)
    res = CliRunner().invoke(
        app, ["doctor", "tools", "http://127.0.0.1:1", "--force-template", str(HYBRID), "--force-prefill", str(HYBRID)]
    )
    assert res.exit_code == 2 and "exclude each other" in res.output
    assert "Traceback" not in res.output


def test_prefill_needs_llama_server_and_an_existing_template(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        app, ["doctor", "tools", "http://127.0.0.1:1", "--force-prefill", str(HYBRID), "--timeout", "5"]
    )
    assert res.exit_code == 1 and "needs llama-server's own endpoint" in res.output
    missing = CliRunner().invoke(
        app, ["doctor", "tools", "http://127.0.0.1:1", "--force-prefill", str(tmp_path / "nope.jinja")]
    )
    assert missing.exit_code == 2 and "nope.jinja" in missing.output
    assert "Traceback" not in res.output + missing.output
