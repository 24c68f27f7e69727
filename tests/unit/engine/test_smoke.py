"""The smoke test's verdicts (ok, signal, timeout, exit, wrong output) with a fake runner, and
the build's fallback past a CPU variant that crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve.engine._build import cpu_provenance, cpu_variants, smoke_with_fallback
from splitserve.engine._smoke import FakeRunner, RunResult, cpu_variant, signal_of, smoke_test

BIN = Path("/e/bin")
BINARIES = {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"}
MODEL = Path("/m/tiny.gguf")


def verdicts(runner: FakeRunner) -> dict[str, str]:
    return {c.name: c.verdict for c in smoke_test(BIN, BINARIES, MODEL, runner).checks}


def test_all_ok_names_the_chosen_cpu_variant() -> None:
    runner = FakeRunner()
    report = smoke_test(BIN, BINARIES, MODEL, runner)
    assert report.ok and report.failed is None
    assert [c.name for c in report.checks] == ["server", "rpc", "bench"]
    assert report.cpu_variant == "x64"
    assert "server, rpc, bench ok" in report.summary()
    # The local check computes on the CPU only; the RPC check offloads every layer to the worker.
    server_argv, rpc_argv, head_argv, bench_argv = runner.calls
    assert server_argv[server_argv.index("--device") + 1] == "none"
    assert rpc_argv[0].endswith("ggml-rpc-server") and rpc_argv[rpc_argv.index("-H") + 1] == "127.0.0.1"
    assert head_argv[head_argv.index("--rpc") + 1] == f"127.0.0.1:{rpc_argv[rpc_argv.index('-p') + 1]}"
    assert "-ngl" in head_argv and head_argv[head_argv.index("-ngl") + 1] == "99"
    assert bench_argv[0].endswith("llama-bench") and "json" in bench_argv


def test_a_server_killed_by_sigill_is_a_signal_verdict_with_its_last_log_lines() -> None:
    log = "llama threadpool init, n_threads = 1\nIllegal instruction"
    runner = FakeRunner({"llama-server": RunResult(-4, log)})
    report = smoke_test(BIN, BINARIES, MODEL, runner)
    bad = report.failed
    assert bad is not None and bad.name == "server" and bad.verdict == "signal"
    assert "SIGILL" in bad.detail and bad.log_tail[-1] == "Illegal instruction"
    assert "SIGILL" in report.summary() and "llama threadpool init" in report.summary()


@pytest.mark.parametrize(("code", "signo"), [(-4, 4), (132, 4), (139, 11), (1, None), (0, None), (None, None)])
def test_signal_of_reads_popen_and_shell_statuses(code: int | None, signo: int | None) -> None:
    assert signal_of(code) == signo


def test_timeout_exit_and_wrong_output() -> None:
    assert verdicts(FakeRunner({"llama-bench": RunResult(None, "", timed_out=True)}))["bench"] == "timeout"
    assert verdicts(FakeRunner({"llama-bench": RunResult(1, "error: failed to load model")}))["bench"] == "exit"
    assert verdicts(FakeRunner({"llama-bench": RunResult(0, "[]")}))["bench"] == "wrong-output"
    zero = '[{"avg_ts": 0}, {"avg_ts": 0}]'
    assert verdicts(FakeRunner({"llama-bench": RunResult(0, zero)}))["bench"] == "wrong-output"
    no_token = RunResult(None, "", reply={"tokens": [], "tokens_predicted": 0, "content": ""})
    v = verdicts(FakeRunner({"llama-server": no_token}))
    assert v["server"] == "wrong-output"


def test_rpc_that_computes_another_token_is_wrong_output() -> None:
    local = RunResult(None, "", reply={"tokens": [228], "tokens_predicted": 1})
    remote = RunResult(None, "", reply={"tokens": [17], "tokens_predicted": 1})
    report = smoke_test(BIN, BINARIES, MODEL, FakeRunner({"llama-server": [local, remote]}))
    bad = report.failed
    assert bad is not None and bad.name == "rpc" and bad.verdict == "wrong-output"
    assert "[17]" in bad.detail and "[228]" in bad.detail


def test_rpc_server_crash_is_blamed_on_the_rpc_server() -> None:
    crashed = RunResult(-11, "Accepted client connection\nSegmentation fault")
    runner = FakeRunner({"ggml-rpc-server": crashed})
    report = smoke_test(BIN, BINARIES, MODEL, runner)
    bad = report.failed
    assert bad is not None and bad.name == "rpc" and bad.verdict == "signal"
    assert "ggml-rpc-server" in bad.detail and "SIGSEGV" in bad.detail
    # It died before listening: the head was never started against it.
    assert not any("--rpc" in argv for argv in runner.calls)


def test_an_rpc_server_that_served_no_client_is_wrong_output() -> None:
    report = smoke_test(BIN, BINARIES, MODEL, FakeRunner({"ggml-rpc-server": RunResult(None, "Starting RPC server")}))
    assert report.failed is not None and report.failed.verdict == "wrong-output"


def test_cpu_variant_is_read_from_the_loader_line() -> None:
    assert (
        cpu_variant("load_backend: loaded CPU backend from /x/bin/libggml-cpu-sapphirerapids.so\n") == "sapphirerapids"
    )
    assert cpu_variant("load_backend: loaded RPC backend from /x/libggml-rpc.so") is None


def _variant_dir(tmp_path: Path, names: list[str]) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for n in names:
        (bin_dir / f"libggml-cpu-{n}.so").write_bytes(b"\x7fELF")
    return bin_dir


def test_a_variant_that_crashes_is_disabled_and_the_next_best_tested(tmp_path: Path) -> None:
    bin_dir = _variant_dir(tmp_path, ["x64", "icelake", "sapphirerapids"])
    amx = "load_backend: loaded CPU backend from /e/libggml-cpu-sapphirerapids.so\n"
    ice = "load_backend: loaded CPU backend from /e/libggml-cpu-icelake.so\n" + FakeRunner.OK_BENCH
    runner = FakeRunner(
        {
            "llama-server": [RunResult(-4, "Illegal instruction")],
            "llama-bench": [RunResult(-4, amx + "Illegal instruction"), RunResult(0, ice)],
        }
    )
    lines: list[str] = []
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lines.append, runner=runner, model=MODEL)
    assert report.ok and report.cpu_variant == "icelake"
    assert list(disabled) == ["sapphirerapids"] and "SIGILL" in disabled["sapphirerapids"]
    assert (bin_dir / "cpu-disabled" / "libggml-cpu-sapphirerapids.so").is_file()
    assert cpu_variants(bin_dir) == ["icelake", "x64"]
    assert any("disabling it" in ln for ln in lines)
    prov = cpu_provenance(False, bin_dir, report, disabled)
    assert prov["cpu_build"] == "portable" and prov["cpu_variant_chosen"] == "icelake"
    assert prov["cpu_variants_disabled"] == disabled and "cpu_tied_to" not in prov


def test_a_crash_without_variants_is_final(tmp_path: Path) -> None:
    bin_dir = _variant_dir(tmp_path, [])
    runner = FakeRunner({"llama-server": RunResult(-4, "Illegal instruction")})
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lambda _m: None, runner=runner, model=MODEL)
    assert not report.ok and disabled == {}
    prov = cpu_provenance(True, bin_dir, report, disabled)
    assert prov["cpu_build"] == "native" and "-march=native" in prov["cpu_tied_to"]


def test_a_crash_that_does_not_depend_on_the_variant_restores_it(tmp_path: Path) -> None:
    bin_dir = _variant_dir(tmp_path, ["x64", "zen4"])
    crash = RunResult(-4, "Illegal instruction")
    zen4 = "load_backend: loaded CPU backend from /e/libggml-cpu-zen4.so\n" + FakeRunner.OK_BENCH
    x64 = "load_backend: loaded CPU backend from /e/libggml-cpu-x64.so\n" + FakeRunner.OK_BENCH
    runner = FakeRunner(
        {
            "llama-server": [crash, crash, crash, crash, crash, crash],
            "llama-bench": [RunResult(0, zen4), RunResult(0, x64), RunResult(0, zen4)],
        }
    )
    lines: list[str] = []
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lines.append, runner=runner, model=MODEL)
    assert not report.ok and report.failed is not None and report.failed.name == "server"
    assert disabled == {} and cpu_variants(bin_dir) == ["x64", "zen4"]
    assert any("restored" in ln for ln in lines)
