"""`plan` on speculation (which types the model can use) and on the MiniMax-M3 sparse-attention trap."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

import splitserve.cli._inspect  # noqa: F401  (registers plan)
from gguf_factory import dense_llama
from spec_factory import glm4moe_mtp, tiny_m3
from splitserve.cli._app import app
from splitserve.cluster import parse_spec
from splitserve.cluster._planning import plan_for_spec, spec_options
from splitserve.model import inspect_model
from splitserve.plan import (
    DRAFT_MODEL_TYPES,
    GIB,
    Node,
    PlanOptions,
    make_plan,
    msa_warnings,
    parse_types,
    speculation_refusal,
    speculation_support,
)
from splitserve.plan._serving import DRAFTLESS_TYPES

NODES = [Node("w1", 8 * GIB), Node("w2", 8 * GIB)]


def small_dense(path: Path) -> Path:
    return dense_llama(path, n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)[0]


def rows(plan_or_rows):  # type: ignore[no-untyped-def]
    seq = plan_or_rows.speculation if hasattr(plan_or_rows, "speculation") else plan_or_rows
    return {r.type: r for r in seq}


def test_draftless_types_always_draft_models_only_with_one_mtp_only_with_nextn(tmp_path: Path) -> None:
    plan = make_plan(inspect_model(small_dense(tmp_path / "d.gguf")), NODES)
    r = rows(plan)
    assert all(r[t].supported for t in DRAFTLESS_TYPES)
    assert not any(r[t].supported for t in DRAFT_MODEL_TYPES)
    assert "server.draft_model" in r["draft-simple"].reason
    assert not r["draft-mtp"].supported and "no MTP layers" in r["draft-mtp"].reason
    assert plan.to_dict()["speculation"]["supported"] == list(DRAFTLESS_TYPES)

    mtp = make_plan(inspect_model(glm4moe_mtp(tmp_path / "g.gguf")[0]), NODES)
    assert rows(mtp)["draft-mtp"].supported and "1 MTP layer" in rows(mtp)["draft-mtp"].reason


def test_a_draft_model_enables_the_draft_types(tmp_path: Path) -> None:
    model = inspect_model(small_dense(tmp_path / "d.gguf"))
    draft = inspect_model(small_dense(tmp_path / "draft.gguf"))
    r = rows(speculation_support(model, draft))
    assert all(r[t].supported for t in DRAFT_MODEL_TYPES)
    assert not r["draft-mtp"].supported  # the draft has no MTP layers either
    mtp_draft = inspect_model(glm4moe_mtp(tmp_path / "sidecar.gguf")[0])
    assert rows(speculation_support(model, mtp_draft))["draft-mtp"].supported


def test_refusal_names_the_type_the_reason_and_what_works(tmp_path: Path) -> None:
    model = inspect_model(small_dense(tmp_path / "d.gguf"))
    assert speculation_refusal(["ngram-mod", "ngram-simple"], model) is None
    msg = speculation_refusal(["ngram-mod", "draft-mtp"], model)
    assert msg is not None and msg.startswith("draft-mtp cannot run with d.gguf: ")
    assert "ngram-mod" in msg and "\n" not in msg


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, []),
        ("none", []),
        ("ngram-mod", ["ngram-mod"]),
        (["ngram-simple", "ngram-mod"], ["ngram-simple", "ngram-mod"]),
        ("ngram-simple,ngram-mod", ["ngram-simple", "ngram-mod"]),
        (["ngram-mod", "ngram-mod"], ["ngram-mod"]),
    ],
)
def test_parse_types(value: object, expected: list[str]) -> None:
    assert parse_types(value) == expected


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("ngram", "unknown speculation type 'ngram'; allowed: none, draft-simple"),
        (["none", "ngram-mod"], "cannot be combined"),
        (3, "expected a type name"),
    ],
)
def test_parse_types_refuses(value: object, needle: str) -> None:
    with pytest.raises(ValueError, match=None) as info:
        parse_types(value)
    assert needle in str(info.value)


def spec_for(model: Path, tmp_path: Path, **server: object):  # type: ignore[no-untyped-def]
    return parse_spec(
        {
            "name": "t",
            "model": str(model),
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "w1", "port": 50100, "memory_gib": 8}, {"name": "w2", "port": 50101, "memory_gib": 8}],
            "server": {"ctx_size": 2048, **server},
        }
    )


def test_plan_for_a_spec_uses_its_draft_model_and_flags_what_up_refuses(tmp_path: Path) -> None:
    model, draft = small_dense(tmp_path / "d.gguf"), small_dense(tmp_path / "draft.gguf")
    plan = plan_for_spec(spec_for(model, tmp_path, speculation="draft-simple", draft_model=str(draft)))
    assert rows(plan)["draft-simple"].supported
    assert any("draft model draft.gguf" in e for e in plan.estimated)
    assert plan.server_args()[-2:] == ["--spec-type", "draft-simple"]
    assert plan.to_dict()["speculation"]["requested"] == ["draft-simple"]
    bad = plan_for_spec(spec_for(model, tmp_path, speculation="draft-mtp"))
    assert any("draft-mtp cannot run" in w and "`up` refuses" in w for w in bad.warnings)


def test_m3_plans_flash_attention_on_and_no_unified_cache(tmp_path: Path) -> None:
    m3 = inspect_model(tiny_m3(tmp_path / "m3.gguf")[0])
    plan = make_plan(m3, NODES, PlanOptions(ctx=4096, parallel=4))
    args = plan.server_args()
    assert args[args.index("-fa") + 1] == "on" and "--kv-unified" not in args
    assert not any("DENSE" in w for w in plan.warnings)
    # the spec's defaults (flash_attn unset, extra_args without -kvu) give the same
    spec = spec_for(tiny_m3(tmp_path / "m3b.gguf")[0], tmp_path, parallel=4)
    opts = spec_options(spec)
    assert opts.flash_attn is True and opts.unified is False


def test_m3_warns_when_asked_for_what_makes_it_dense(tmp_path: Path) -> None:
    m3 = inspect_model(tiny_m3(tmp_path / "m3.gguf")[0])
    off = make_plan(m3, NODES, PlanOptions(ctx=4096, flash_attn=False))
    (w,) = [w for w in off.warnings if "DENSE" in w]
    assert "flash attention off" in w and 'flash_attn = "on"' in w
    unified = make_plan(m3, NODES, PlanOptions(ctx=4096, parallel=2, unified=True))
    (w,) = [w for w in unified.warnings if "DENSE" in w]
    assert "--kv-unified with parallel = 2" in w and "drop --kv-unified" in w
    one_slot = make_plan(m3, NODES, PlanOptions(ctx=4096, parallel=1, unified=True))
    assert not any("DENSE" in w for w in one_slot.warnings)
    # the same settings on another architecture say nothing
    dense = make_plan(
        inspect_model(small_dense(tmp_path / "d.gguf")),
        NODES,
        PlanOptions(ctx=2048, parallel=2, unified=True, flash_attn=False),
    )
    assert not any("DENSE" in w for w in dense.warnings)


def test_spec_options_read_kv_unified_from_extra_args_and_env(tmp_path: Path) -> None:
    model = small_dense(tmp_path / "d.gguf")
    assert spec_options(spec_for(model, tmp_path, extra_args=["-kvu"])).unified is True
    assert spec_options(spec_for(model, tmp_path, extra_args=["--kv-unified", "--no-kv-unified"])).unified is False
    assert spec_options(spec_for(model, tmp_path, env={"LLAMA_ARG_KV_UNIFIED": "1"})).unified is True
    assert msa_warnings("minimax-m3", flash_attn=None, kv_unified=False, parallel=8) == []


def test_plan_cli_says_which_types_the_model_supports(tmp_path: Path) -> None:
    model = small_dense(tmp_path / "d.gguf")
    r = CliRunner().invoke(app, ["plan", str(model), "--node", "a=8", "--node", "b=8"])
    assert r.exit_code == 0, r.stdout
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("speculation"))
    assert "ngram-mod" in line and "draft-mtp (the GGUF has no MTP layers" in line
    assert "draft-simple" in line and "need a draft model" in line
    j = json.loads(
        CliRunner().invoke(app, ["plan", str(glm4moe_mtp(tmp_path / "g.gguf")[0]), "--node", "a=8", "--json"]).stdout
    )
    assert "draft-mtp" in j["speculation"]["supported"]
    m3 = tiny_m3(tmp_path / "m3.gguf")[0]
    r = CliRunner().invoke(app, ["plan", str(m3), "--node", "a=8", "--ctx", "4096", "-np", "2", "-kvu"])
    assert "warning:" in r.stdout and "DENSE" in r.stdout and "drop --kv-unified" in r.stdout
    r = CliRunner().invoke(app, ["plan", str(m3), "--node", "a=8", "--ctx", "4096"])
    assert "DENSE" not in r.stdout and "-fa on" in r.stdout


def test_plan_options_stay_hashable_with_speculation() -> None:
    o = replace(PlanOptions(), speculation=("ngram-mod",))
    assert hash(o) == hash(replace(PlanOptions(), speculation=("ngram-mod",)))
