"""Speculative decoding as a spec setting: the keys, their flags, the refusals; the MiniMax-M3
trap in the command line, in `up`'s warnings and in the load log; status's counters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gguf_factory import dense_llama
from spec_factory import glm4moe_mtp, tiny_m3
from splitserve import SpecError
from splitserve.cluster import launch_plan, load_spec, load_warnings, parse_spec, up
from splitserve.cluster._commands import SPEC_FLAGS
from splitserve.cluster._down import check_serving
from splitserve.cluster._spec import ServerSpec, check_files
from splitserve.cluster._status import parse_spec_metrics
from splitserve.engine import Engine


def fake_engine(root: Path) -> Engine:
    return Engine(
        root=root / "eng",
        bin_dir=root / "eng" / "bin",
        provenance={
            "key": "eng",
            "backend": "cpu",
            "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"},
        },
    )


def spec_of(tmp_path: Path, model: str | Path = "/models/m.gguf", **server: Any):  # type: ignore[no-untyped-def]
    return parse_spec(
        {
            "name": "t",
            "model": str(model),
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "w1", "port": 50152}],
            "server": server,
        }
    )


def head_argv(tmp_path: Path, spec) -> list[str]:  # type: ignore[no-untyped-def]
    eng = fake_engine(tmp_path)
    return launch_plan(spec, {"head": eng, "w1": eng}).head.argv


def small_dense(path: Path) -> Path:
    return dense_llama(path, n_layer=2, n_embd=128, n_head=2, n_head_kv=2, n_ff=256, n_vocab=512)[0]


# -- the spec keys -------------------------------------------------------------------------------


def test_speculation_is_off_by_default_and_adds_no_flag(tmp_path: Path) -> None:
    spec = spec_of(tmp_path)
    assert spec.server.speculation == []
    argv = head_argv(tmp_path, spec)
    assert not any(a.startswith("--spec") for a in argv)
    assert argv.count("--metrics") == 1  # always on: the gateway relays it
    assert spec_of(tmp_path, speculation="none").server.speculation == []


def test_a_type_a_list_or_a_comma_list(tmp_path: Path) -> None:
    assert spec_of(tmp_path, speculation="ngram-mod").server.speculation == ["ngram-mod"]
    assert spec_of(tmp_path, speculation=["ngram-simple", "ngram-mod"]).server.speculation == [
        "ngram-simple",
        "ngram-mod",
    ]
    assert spec_of(tmp_path, speculation="ngram-simple,ngram-map-k").server.speculation == [
        "ngram-simple",
        "ngram-map-k",
    ]


def test_an_unknown_type_is_one_line_naming_the_key_and_the_allowed_values(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\nspeculation = "ngram-fast"\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"{path}: server.speculation: unknown speculation type 'ngram-fast'; allowed: none, ")
    for t in (
        "draft-simple",
        "draft-eagle3",
        "draft-mtp",
        "ngram-simple",
        "ngram-map-k",
        "ngram-map-k4v",
        "ngram-mod",
        "ngram-cache",
    ):
        assert t in msg


@pytest.mark.parametrize(
    ("server", "needle"),
    [
        ({"speculation": ["none", "ngram-mod"]}, "cannot be combined"),
        ({"speculation": "draft-simple"}, "server.draft_model: required with speculation = 'draft-simple'"),
        ({"speculation": "draft-eagle3"}, "server.draft_model: required with speculation = 'draft-eagle3'"),
        ({"speculation": "ngram-mod", "spec_synth_len": 2.0, "spec_synth_rates": [0.5]}, "mutually exclusive"),
        ({"speculation": "ngram-mod", "spec_synth_rates": [0.5, 0.7]}, "must not increase"),
        ({"spec_ngram_mod_n_match": 0}, "server.spec_ngram_mod_n_match"),
        ({"spec_draft_sampling": "random"}, "server.spec_draft_sampling"),
        (
            {"spec_ngram_fast": 1},
            "server.spec_ngram_fast: unknown key in [server]; did you mean spec_ngram_mod_n_match",
        ),
    ],
)
def test_bad_speculation_settings(tmp_path: Path, server: dict[str, Any], needle: str) -> None:
    with pytest.raises(SpecError) as info:
        spec_of(tmp_path, **server)
    assert needle in str(info.value) and "\n" not in str(info.value)


# -- the flags -----------------------------------------------------------------------------------


def test_ngram_mod_with_its_parameters(tmp_path: Path) -> None:
    spec = spec_of(
        tmp_path,
        speculation="ngram-mod",
        spec_ngram_mod_n_match=16,
        spec_ngram_mod_n_min=8,
        spec_ngram_mod_n_max=32,
        # parameters of types not enabled are left out (one spec serves a speculation sweep)
        spec_ngram_simple_size_n=4,
        spec_draft_n_max=8,
    )
    argv = head_argv(tmp_path, spec)
    i = argv.index("--spec-type")
    assert argv[i : i + 8] == [
        "--spec-type",
        "ngram-mod",
        "--spec-ngram-mod-n-match",
        "16",
        "--spec-ngram-mod-n-min",
        "8",
        "--spec-ngram-mod-n-max",
        "32",
    ]
    assert "--spec-ngram-simple-size-n" not in argv and "--spec-draft-n-max" not in argv


def test_every_parameter_maps_to_the_pinned_flag(tmp_path: Path) -> None:
    values: dict[str, Any] = {
        "spec_draft_n_max": 16,
        "spec_draft_n_min": 2,
        "spec_draft_p_min": 0.75,
        "spec_draft_p_split": 0.1,
        "spec_draft_sampling": "probabilistic",
        "spec_draft_ngl": "all",
        "spec_draft_device": ["RPC0", "CUDA0"],
        "spec_synth_rates": [0.9, 0.5, 0.25],
    }
    for t in ("simple", "map_k", "map_k4v"):
        values |= {f"spec_ngram_{t}_size_n": 6, f"spec_ngram_{t}_size_m": 24, f"spec_ngram_{t}_min_hits": 2}
    values |= {"spec_ngram_mod_n_match": 24, "spec_ngram_mod_n_min": 48, "spec_ngram_mod_n_max": 64}
    assert set(values) | {"spec_synth_len"} == set(SPEC_FLAGS), "a test value for every key"
    draft = tmp_path / "draft.gguf"
    spec = spec_of(
        tmp_path,
        speculation=["draft-simple", "ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod"],
        draft_model=str(draft),
        **values,
    )
    argv = head_argv(tmp_path, spec)

    def value(flag: str) -> str:
        return argv[argv.index(flag) + 1]

    assert value("--spec-type") == "draft-simple,ngram-simple,ngram-map-k,ngram-map-k4v,ngram-mod"
    assert value("--spec-draft-model") == str(draft)
    assert value("--spec-draft-n-max") == "16" and value("--spec-draft-n-min") == "2"
    assert value("--spec-draft-p-min") == "0.75" and value("--spec-draft-p-split") == "0.1"
    assert value("--spec-draft-sampling") == "probabilistic" and value("--spec-draft-ngl") == "all"
    assert value("--spec-draft-device") == "RPC0,CUDA0"
    assert value("--spec-synth-rates") == "0.9,0.5,0.25"
    for t in ("simple", "map-k", "map-k4v"):
        assert value(f"--spec-ngram-{t}-size-n") == "6" and value(f"--spec-ngram-{t}-size-m") == "24"
        assert value(f"--spec-ngram-{t}-min-hits") == "2"
    assert value("--spec-ngram-mod-n-match") == "24"
    synth = head_argv(tmp_path, spec_of(tmp_path, speculation="ngram-mod", spec_synth_len=2.5))
    assert synth[synth.index("--spec-synth-len") + 1] == "2.5"
    # every flag is one the pinned llama.cpp accepts (common/arg.cpp), none of the removed ones
    flags = [a for a in argv if a.startswith("--spec")]
    assert not {"--draft", "--draft-max", "--draft-min", "--spec-ngram-size-n"} & set(flags)
    assert argv.index("--spec-type") < len(argv) - len(spec.server.extra_args)


def test_draft_model_resolves_next_to_the_spec_and_is_passed_only_for_draft_types(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        'model = "m.gguf"\n[[workers]]\nname = "w1"\n[server]\nspeculation = "draft-simple"\n'
        'draft_model = "models/draft.gguf"\n'
    )
    spec = load_spec(path)
    assert spec.server.draft_model == (tmp_path / "models" / "draft.gguf").resolve()
    argv = head_argv(tmp_path, spec)
    assert argv[argv.index("--spec-draft-model") + 1] == str(tmp_path / "models" / "draft.gguf")
    ngram = spec_of(tmp_path, speculation="ngram-mod", draft_model=str(tmp_path / "d.gguf"))
    assert "--spec-draft-model" not in head_argv(tmp_path, ngram)


def test_a_missing_draft_model_is_refused_at_launch_with_the_key(tmp_path: Path) -> None:
    model = small_dense(tmp_path / "m.gguf")
    spec = spec_of(tmp_path, model, speculation="draft-simple", draft_model=str(tmp_path / "nope.gguf"))
    with pytest.raises(SpecError, match=r"server\.draft_model: .*nope\.gguf does not exist"):
        check_files(spec)
    check_files(spec_of(tmp_path, model, speculation="ngram-mod", draft_model=str(tmp_path / "nope.gguf")))


# -- up refuses what the model cannot use ----------------------------------------------------------


def test_up_refuses_draft_mtp_on_a_model_without_mtp_before_anything_starts(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, small_dense(tmp_path / "m.gguf"), speculation="draft-mtp")
    with pytest.raises(SpecError) as info:
        up(spec, engine=fake_engine(tmp_path), preflight=False)
    msg = str(info.value)
    assert "\n" not in msg
    assert "server.speculation: draft-mtp cannot run with m.gguf: the GGUF has no MTP layers" in msg
    assert "this model supports: ngram-simple" in msg
    assert not (tmp_path / "st" / "state.json").exists()


def test_draft_mtp_passes_where_the_gguf_has_mtp_layers(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, glm4moe_mtp(tmp_path / "g.gguf")[0], speculation="draft-mtp", spec_draft_n_max=2)
    assert check_serving(spec) == []
    argv = head_argv(tmp_path, spec)
    assert argv[argv.index("--spec-type") + 1] == "draft-mtp" and "--spec-draft-n-max" in argv
    assert "--spec-draft-model" not in argv


def test_up_cli_refuses_in_one_line_and_exits_non_zero(tmp_path: Path) -> None:
    import splitserve.cli._cluster  # noqa: F401  (registers up)
    from splitserve.cli._app import app

    model = small_dense(tmp_path / "m.gguf")
    path = tmp_path / "c.toml"
    path.write_text(
        f'model = "{model}"\nstate_dir = "{tmp_path / "st"}"\n[[workers]]\nname = "w1"\n'
        '[server]\nspeculation = ["ngram-mod", "draft-mtp"]\n'
    )
    r = CliRunner().invoke(app, ["up", "-c", str(path)])
    assert r.exit_code != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "draft-mtp cannot run" in lines[0], r.stderr
    assert not (tmp_path / "st" / "state.json").exists()


def test_dry_run_shows_the_flags(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from splitserve.cli._app import app

    eng = fake_engine(tmp_path)
    import splitserve.cluster._execute as execute

    monkeypatch.setattr(
        execute, "resolve_engines", lambda spec, engine=None: {"head": eng} | {w.name: eng for w in spec.workers}
    )
    path = tmp_path / "c.toml"
    path.write_text(
        f'model = "{small_dense(tmp_path / "m.gguf")}"\n[[workers]]\nname = "w1"\n'
        '[server]\nspeculation = "ngram-simple"\nspec_ngram_simple_size_n = 8\n'
    )
    r = CliRunner().invoke(app, ["up", "-c", str(path), "--dry-run"])
    assert r.exit_code == 0, r.stderr
    assert "--spec-type ngram-simple --spec-ngram-simple-size-n 8" in r.stdout
    assert "--metrics" in r.stdout


# -- MiniMax-M3 ------------------------------------------------------------------------------------


def test_m3_gets_flash_attention_on_unless_the_spec_says_otherwise(tmp_path: Path) -> None:
    m3 = tiny_m3(tmp_path / "m3.gguf")[0]
    argv = head_argv(tmp_path, spec_of(tmp_path, m3, parallel=4))
    assert argv[argv.index("--flash-attn") + 1] == "on" and "--kv-unified" not in argv
    assert argv[argv.index("--parallel") + 1] == "4"
    off = head_argv(tmp_path, spec_of(tmp_path, m3, flash_attn="off"))
    assert off[off.index("--flash-attn") + 1] == "off"
    # other architectures keep llama.cpp's default
    assert "--flash-attn" not in head_argv(tmp_path, spec_of(tmp_path, small_dense(tmp_path / "d.gguf")))


def test_up_warns_when_the_spec_asks_for_dense_m3(tmp_path: Path) -> None:
    m3 = tiny_m3(tmp_path / "m3.gguf")[0]
    assert check_serving(spec_of(tmp_path, m3, parallel=4)) == []
    (w,) = check_serving(spec_of(tmp_path, m3, flash_attn="off"))
    assert "DENSE" in w and 'server.flash_attn = "on"' in w
    (w,) = check_serving(spec_of(tmp_path, m3, parallel=2, extra_args=["--kv-unified"]))
    assert "--kv-unified with parallel = 2" in w and "drop --kv-unified" in w
    assert check_serving(spec_of(tmp_path, m3, parallel=1, extra_args=["-kvu"])) == []


def test_up_emits_the_warnings_before_it_starts(tmp_path: Path) -> None:
    from splitserve.cluster import Event

    events: list[Event] = []
    m3 = tiny_m3(tmp_path / "m3.gguf")[0]
    spec = parse_spec(
        {
            "name": "t",
            "model": str(m3),
            "state_dir": str(tmp_path / "st"),
            "workers": [{"name": "w1", "port": 50152, "memory_gib": 0.0001}],
            "server": {"flash_attn": "off"},
        }
    )
    with pytest.raises(Exception):  # noqa: B017 - the plan refuses it (too small), after the warning
        up(spec, engine=fake_engine(tmp_path), preflight=False, on_event=events.append)
    assert [e.kind for e in events][:1] == ["warning"] and "DENSE" in events[0].message


def test_synthetic_acceptance_is_a_warning(tmp_path: Path) -> None:
    spec = spec_of(tmp_path, small_dense(tmp_path / "m.gguf"), speculation="ngram-mod", spec_synth_len=3.0)
    (w,) = check_serving(spec)
    assert "NOT the model's output" in w


M3_LOG = """# splitserve: llama-server --model m3.gguf
llama_model_loader: loaded meta data with 50 key-value pairs and 1000 tensors
llm_build_minimax_m3: flash attention disabled; MSA requires it -> running DENSE attention \
(output may be degraded). Enable flash attention for MSA.
llm_build_minimax_m3: unified KV cache with n_seq_max > 1; MSA needs per-sequence streams -> \
running DENSE attention. Output may be degraded. Drop --kv-unified to enable MSA.
llama_init_from_model: context type MTP requested but model doesn't contain MTP layers
common_speculative_init: synthetic speculative acceptance is enabled for benchmarking; generated output is not valid
main: server is listening
"""


def test_load_log_warnings_come_with_their_fix() -> None:
    found = {w.kind: w for w in load_warnings(M3_LOG)}
    assert list(found) == ["msa_dense_no_flash_attn", "msa_dense_kv_unified", "mtp_missing", "synthetic_acceptance"]
    assert 'flash_attn = "on"' in found["msa_dense_no_flash_attn"].fix
    assert "drop --kv-unified" in found["msa_dense_kv_unified"].fix
    assert found["msa_dense_no_flash_attn"].line().startswith("llama-server: llm_build_minimax_m3: flash attention")
    assert "-> fix:" in found["mtp_missing"].line()
    assert load_warnings("llama_model_loader: loaded meta data\nmain: server is listening\n") == []
    # only the last start counts
    assert load_warnings(M3_LOG + "# splitserve: llama-server --model m3.gguf --flash-attn on\n") == []


def test_status_shows_the_warnings_and_the_engine_counters(tmp_path: Path) -> None:
    from splitserve.cli._cluster import console, print_status

    metrics = (
        "# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated\n"
        "# TYPE llamacpp:spec_decode_num_draft_tokens_total counter\n"
        "llamacpp:spec_decode_num_draft_tokens_total 480\n"
        "llamacpp:spec_decode_num_accepted_tokens_total 360\n"
        "llamacpp:spec_decode_num_drafts_total 20\n"
        "llamacpp:tokens_predicted_total 900\n"
    )
    spec = parse_spec_metrics(metrics)
    assert spec == {"drafted": 480, "accepted": 360, "drafts": 20, "acceptance_rate": 0.75}
    assert parse_spec_metrics("llamacpp:tokens_predicted_total 5\n")["acceptance_rate"] is None
    data = {
        "name": "t",
        "phase": "ready",
        "endpoint": "http://127.0.0.1:8000",
        "model": "m3.gguf",
        "processes": [],
        "memory": [],
        "slots": None,
        "speculation": {"types": ["ngram-mod"], **spec},
        "warnings": [w.as_dict() for w in load_warnings(M3_LOG)][:1],
    }
    with console.capture() as cap:
        print_status(data)
    out = cap.get()
    assert "speculation: ngram-mod: drafted 480, accepted 360 (75.0%) in 20 drafts" in out
    assert "warning:" in out and "DENSE" in out and "fix:" in out


def test_server_spec_fields_are_the_documented_ones() -> None:
    spec_keys = {k for k in ServerSpec.model_fields if k.startswith("spec_")}
    assert spec_keys == set(SPEC_FLAGS)
    docs = (Path(__file__).parents[3] / "docs" / "cluster.md").read_text()
    for key in [*spec_keys, "speculation", "draft_model"]:
        assert f"`{key}`" in docs, f"docs/cluster.md documents server.{key}"
