"""Templates: the HF-compatible environment, GGUF extraction, detection, check, transplant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from splitserve.chat import (
    TemplateError,
    TransplantError,
    check_template,
    detect_format,
    get_format,
    load_recipe,
    read_chat_templates,
    render_chat,
    transplant,
)
from splitserve.chat._transplant import _parse, list_recipes


@pytest.fixture(scope="module")
def tdir() -> Path:
    from splitserve.engine import resolve_source

    return Path(resolve_source(None).path) / "models" / "templates"


# -- the environment ------------------------------------------------------------------------


def test_environment_matches_hugging_face() -> None:
    t = (
        "{% for m in messages %}{% if loop.index > 2 %}{% break %}{% endif %}"
        "{{ m | tojson }}|{{ m | tojson(indent=1, sort_keys=True) }}\n{% endfor %}"
        "{{ strftime_now('%Y') | length }}{% generation %}G{% endgeneration %}"
    )
    out = render_chat(t, [{"role": "user", "content": "<é & ü>"}] * 3)
    first = out.splitlines()[0]
    assert first.startswith('{"role": "user", "content": "<é & ü>"}|{')  # no HTML escaping
    assert out.count('"role": "user", "content"') == 2  # loopcontrols: break after two
    assert out.endswith("4G")


def test_trim_and_lstrip_blocks_as_hf_sets_them() -> None:
    t = "A\n  {% if true %}\nB\n  {% endif %}\nC"
    assert render_chat(t, []) == "A\nB\nC"


def test_raise_exception_and_bad_templates_are_one_line_errors() -> None:
    with pytest.raises(TemplateError, match="refused these messages: no system"):
        render_chat("{{ raise_exception('no system') }}", [])
    with pytest.raises(TemplateError, match="line 1"):
        render_chat("{% if %}", [])
    with pytest.raises(TemplateError, match="failed to render"):
        render_chat("{{ messages[5].content.upper() }}", [])


def test_arguments_strings_reach_templates_as_mappings(tdir: Path) -> None:
    call = {"id": "c", "type": "function", "function": {"name": "f", "arguments": json.dumps({"a": 1})}}
    out = render_chat(
        "{% for c in messages[0].tool_calls %}{% for k, v in "
        "c.function.arguments.items() %}{{ k }}={{ v }}{% endfor %}{% endfor %}",
        [{"role": "assistant", "content": None, "tool_calls": [call]}],
    )
    assert out == "a=1"
    joined = render_chat(
        "{{ '>>>' + messages[0].tool_calls[0].function.arguments + '<' }}",
        [{"role": "assistant", "content": None, "tool_calls": [call]}],
    )
    assert joined == '>>>{"a": 1}<'  # templates written for a string join it as its JSON
    qwen3 = (tdir / "Qwen-Qwen3-0.6B.jinja").read_text()
    # content None would fail in Qwen3's `'</think>' in content`; it is given as ""
    assert "<tool_call>" in render_chat(
        qwen3,
        [{"role": "user", "content": "x"}, {"role": "assistant", "content": None, "tool_calls": [call]}],
        add_generation_prompt=False,
    )


# -- GGUF -------------------------------------------------------------------------------------


def test_extract_named_templates_and_bad_files(tmp_path: Path) -> None:
    import gguf

    path = tmp_path / "t.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_chat_template([{"name": "default", "template": "D"}, {"name": "tool_use", "template": "T"}])
    w.add_array("tokenizer.ggml.tokens", ["a", "b", "c"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    assert read_chat_templates(path) == {"default": "D", "tool_use": "T"}
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"NOPE" + b"\0" * 20)
    with pytest.raises(TemplateError, match="not a GGUF"):
        read_chat_templates(bad)
    short = tmp_path / "short.gguf"
    short.write_bytes(path.read_bytes()[:40])
    with pytest.raises(TemplateError, match="ends early"):
        read_chat_templates(short)
    with pytest.raises(TemplateError, match="cannot open"):
        read_chat_templates(tmp_path / "missing.gguf")


# -- detection --------------------------------------------------------------------------------

DETECTED = {
    "MiniMax-M3": "minimax-m3",
    "MiniMax-M2": "minimax-m2",
    "Qwen-Qwen2.5-7B-Instruct": "hermes",
    "Qwen-Qwen3-0.6B": "hermes",
    "Qwen-QwQ-32B": "hermes",
    "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use": "hermes",
    "NousResearch-Hermes-3-Llama-3.1-8B-tool_use": "hermes",
    "Qwen3-Coder": "qwen3-coder",
    "Qwen3.5-4B": "qwen3-coder",
    "meta-llama-Llama-3.1-8B-Instruct": "llama3-json",
    "meta-llama-Llama-3.2-3B-Instruct": "llama3-json",
    "meta-llama-Llama-3.3-70B-Instruct": "llama3-json",
    "deepseek-ai-DeepSeek-V3.1": "deepseek-v3",
    "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B": "deepseek-v3",
    "deepseek-ai-DeepSeek-V3.2": "deepseek-v3.2",
    "deepseek-ai-DeepSeek-V4": "deepseek-v4",
    "deepseek-ai-DeepSeek-V4-Flash-0731": "deepseek-v4",
    "MiniMax-M1": "minimax-m1",
    "GLM-4.6": "glm-4.5",
    "GLM-4.7-Flash": "glm-4.7",
    "ByteDance-Seed-OSS": "seed-oss",
    "Spark2.5": "glm-4.7",
    "poolside-Laguna-S-2.1": "glm-4.7",
    "poolside-Laguna-XS-2.1": "glm-4.5",
    "poolside-Laguna-XS.2": "glm-4.5",
    "inclusionai-ling-3.0-flash": "glm-4.5",
    "StepFun3.5-Flash": "qwen3-coder",
    "MiMo-VL": "hermes",
    "google-gemma-2-2b-it": None,
    "microsoft-Phi-3.5-mini-instruct": None,
    "openai-gpt-oss-120b": "gpt-oss",
    "llm-jp-llm-jp-4.1-8b-thinking": None,
    "moonshotai-Kimi-K2": "kimi-k2",
    "Kimi-K2-Instruct": "kimi-k2",
    "Kimi-K2-Thinking": "kimi-k2",
    "Kimi-K3": "kimi-k3",
    "Mistral-Small-3.2-24B-Instruct-2506": "mistral",
    "unsloth-mistral-Devstral-Small-2507": "mistral",
    "mistralai-Ministral-3-14B-Reasoning-2512": "mistral",
    "mistralai-Mistral-Nemo-Instruct-2407": "mistral",
}


@pytest.mark.parametrize(("name", "fmt"), DETECTED.items())
def test_detect_format_on_real_templates(tdir: Path, name: str, fmt: str | None) -> None:
    assert detect_format((tdir / f"{name}.jinja").read_text()) == fmt


# -- check ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "MiniMax-M3",
        "MiniMax-M2",
        "Qwen-Qwen2.5-7B-Instruct",
        "Qwen-Qwen3-0.6B",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use",
        "Qwen3-Coder",
        "Qwen3.5-4B",
        "deepseek-ai-DeepSeek-V3.1",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B",
        "GLM-4.6",
        "GLM-4.7-Flash",
        "ByteDance-Seed-OSS",
        "StepFun3.5-Flash",
        "MiMo-VL",
        "moonshotai-Kimi-K2",
        "Kimi-K3",
        "unsloth-mistral-Devstral-Small-2507",
        "mistralai-Ministral-3-14B-Reasoning-2512",
    ],
)
def test_check_passes_real_templates(tdir: Path, name: str) -> None:
    text = (tdir / f"{name}.jinja").read_text()
    results = check_template(text, get_format(detect_format(text) or ""))
    assert [r.name for r in results if not r.ok] == [], [r.problems for r in results]


def test_check_reports_what_a_template_refuses(tdir: Path) -> None:
    text = (tdir / "meta-llama-Llama-3.1-8B-Instruct.jinja").read_text()
    failed = {r.name: r.problems for r in check_template(text, get_format("llama3-json")) if not r.ok}
    assert list(failed) == ["parallel calls"]
    assert "single tool-calls" in failed["parallel calls"][0]


def test_check_catches_a_format_mismatch(tdir: Path) -> None:
    text = (tdir / "MiniMax-M3.jinja").read_text()
    failed = [r.name for r in check_template(text, get_format("minimax-m2")) if not r.ok]
    assert "single tool call" in failed and "parallel calls" in failed


# -- transplant -------------------------------------------------------------------------------


def test_minimax_m3_hybrid_on_the_real_templates(tdir: Path) -> None:
    base = (tdir / "MiniMax-M3.jinja").read_text()
    donor = (tdir / "MiniMax-M2.jinja").read_text()
    recipe = load_recipe("minimax-m3-hybrid")
    assert "minimax-m3-hybrid" in list_recipes() and len(recipe.blocks) == 3
    hybrid = transplant(base, donor, recipe)
    # kept from M3: roles, <mm:think>, the adaptive generation prompt, <response> results
    for kept in ("bos_token ~ 'ai'", "<mm:think>", "'\\n<response>'", "thinking_mode", "to_xml"):
        assert kept in hybrid, kept
    # taken from M2: the tokens, the instruction block, the renderer
    assert "'<minimax:tool_call>'" in hybrid and '<parameter name="param-key-1">' in hybrid
    assert "To call tools, wrap all invocations" not in hybrid
    assert "<think>" not in hybrid.replace("<mm:think>", "")
    assert detect_format(hybrid) == "minimax-m3-hybrid"
    results = check_template(hybrid, get_format("minimax-m3-hybrid"))
    assert all(r.ok for r in results), [(r.name, r.problems) for r in results]
    prompt = render_chat(hybrid, [{"role": "user", "content": "hi"}], thinking_mode="enabled")
    assert prompt.endswith("]~b]ai\n<mm:think>")


def test_transplant_fails_loudly_naming_the_block(tdir: Path) -> None:
    base = (tdir / "MiniMax-M3.jinja").read_text()
    donor = (tdir / "MiniMax-M2.jinja").read_text()
    recipe = load_recipe("minimax-m3-hybrid")
    changed = base.replace("{{- 'To call tools, wrap all invocations", "{{- 'To call a tool")
    with pytest.raises(TransplantError, match=r"block 'tool-call instruction block'.*not found"):
        transplant(changed, donor, recipe, "M3.jinja")
    doubled = donor + donor
    with pytest.raises(TransplantError, match=r"found 2 times in M2\.jinja"):
        transplant(base, doubled, recipe, "M3.jinja", "M2.jinja")


def test_recipe_files_literal_blocks_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "r.toml"
    f.write_text(
        "name = 'mine'\n[[block]]\nname = 'greeting'\nbase_start = 'Hello'\nbase_end = 'world'\ntext = 'Bye'\n"
    )
    assert transplant("<Hello big world!>", "", load_recipe(f)) == "<Bye!>"
    with pytest.raises(TransplantError, match="no recipe named"):
        load_recipe("nope")
    with pytest.raises(TransplantError, match="lacks donor_start, donor_end"):
        _parse("[[block]]\nname='x'\nbase_start='a'\nbase_end='b'\n", "r.toml")
    with pytest.raises(TransplantError, match="not valid TOML"):
        _parse("[[block", "r.toml")
    with pytest.raises(TransplantError, match="overlap"):
        transplant(
            "abcdef",
            "",
            _parse(
                "[[block]]\nname='one'\nbase_start='ab'\nbase_end='d'\ntext=''\n"
                "[[block]]\nname='two'\nbase_start='c'\nbase_end='f'\ntext=''\n",
                "r",
            ),
        )
