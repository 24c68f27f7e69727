"""The CLI: splitserve template extract|render|check|transplant and splitserve parse."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from splitserve.cli._app import main

NS = "]<]minimax[>["


@pytest.fixture(scope="module")
def tdir() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        main(args)
        code = 0
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_parse_prints_openai_json_and_exits_0_for_any_output(tmp_path: Path) -> None:
    tools = tmp_path / "tools.json"
    tools.write_text(
        json.dumps(
            [
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "parameters": {
                            "type": "object",
                            "properties": {"days": {"type": "integer"}, "code": {"type": "string"}},
                        },
                    },
                }
            ]
        )
    )
    out = (
        f'<mm:think>hm</mm:think>Sure.{NS}<tool_call>{NS}<invoke name="get_weather">'
        f"{NS}<days>3{NS}</days>{NS}<code>007{NS}</code>{NS}</invoke>{NS}</tool_call>"
    )
    r = subprocess.run(
        [sys.executable, "-m", "splitserve", "parse", "--format", "minimax-m3", "--tools", str(tools)],
        input=out.encode(),
        capture_output=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["content"] == "Sure." and data["reasoning_content"] == "hm"
    (call,) = data["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"days": 3, "code": "007"}
    bad = subprocess.run(
        [sys.executable, "-m", "splitserve", "parse", "--format", "hermes", "--warnings"],
        input=b"<tool_call>{broken\xff",
        capture_output=True,
        check=False,
    )
    assert bad.returncode == 0
    assert json.loads(bad.stdout)["tool_calls"] == [] and "warning:" in bad.stderr.decode()


def test_parse_unknown_format_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = cli(["parse", "--format", "nope"], capsys)
    assert code == 2 and err.count("\n") == 1 and "known: minimax-m3" in err


def test_template_commands(tmp_path: Path, tdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """render, check, formats and transplant on the engine's template files (the SmolLM2 GGUF's
    own template: tests/integration/test_real_models.py)."""
    messages = tmp_path / "m.json"
    messages.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}]}))
    code, out, _ = cli(
        [
            "template",
            "render",
            "--template",
            str(tdir / "MiniMax-M3.jinja"),
            "--messages",
            str(messages),
            "--kwargs",
            '{"thinking_mode": "enabled"}',
        ],
        capsys,
    )
    assert code == 0 and out.rstrip().endswith("<mm:think>")
    code, _, err = cli(["template", "render", "--messages", str(messages)], capsys)
    assert code == 2 and "exactly one of --template" in err

    code, out, _ = cli(["template", "check", "--template", str(tdir / "MiniMax-M3.jinja"), "--strict"], capsys)
    assert code == 0 and "minimax-m3" in out and "FAIL" not in out
    code, out, _ = cli(
        ["template", "check", "--template", str(tdir / "meta-llama-Llama-3.1-8B-Instruct.jinja")], capsys
    )
    assert code == 1 and "FAIL" in out  # a failing conversation fails the command, --strict or not
    code, out, _ = cli(["template", "formats", "--json"], capsys)
    names = [f["name"] for f in json.loads(out)]
    assert code == 0 and "minimax-m3" in names and "hermes" in names and names[-1] == "plain"

    hybrid = tmp_path / "hybrid.jinja"
    code, _, err = cli(
        [
            "template",
            "transplant",
            "--base",
            str(tdir / "MiniMax-M3.jinja"),
            "--donor",
            str(tdir / "MiniMax-M2.jinja"),
            "--recipe",
            "minimax-m3-hybrid",
            "-o",
            str(hybrid),
        ],
        capsys,
    )
    assert code == 0 and "3 blocks replaced" in err and "<minimax:tool_call>" in hybrid.read_text()
    code, _, err = cli(
        [
            "template",
            "transplant",
            "--base",
            str(tdir / "MiniMax-M2.jinja"),
            "--donor",
            str(tdir / "MiniMax-M2.jinja"),
            "--recipe",
            "minimax-m3-hybrid",
            "-o",
            str(tmp_path / "x.jinja"),
        ],
        capsys,
    )
    assert code == 1 and "block 'tool-call token definitions'" in err
    assert not (tmp_path / "x.jinja").exists()


def test_template_formats_prints_markers_that_look_like_markup(capsys: pytest.CaptureFixture[str]) -> None:
    # Mistral's [THINK]...[/THINK] once crashed the table (rich read it as a closing tag)
    rc, out, _ = cli(["template", "formats"], capsys)
    assert rc == 0
    assert "[THINK] ... [/THINK]" in out and "mistral" in out
