"""The smoke test's verdicts (ok, signal, timeout, exit, wrong output) on a fake node (the root's
FakeNodes: its processes, their logs and exit statuses, on a fake clock), and the
build's fallback past a CPU variant that crashes."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from splitserve._node_fake import FakeNodes, FakeProcess, Program
from splitserve.engine import SmokeEdges
from splitserve.engine._build import cpu_provenance, cpu_variants, smoke_with_fallback
from splitserve.engine._smoke import cpu_variant, signal_of, smoke_test

BIN = Path("/e/bin")
BINARIES = {"server": "llama-server", "rpc_server": "ggml-rpc-server", "bench": "llama-bench"}
MODEL = Path("/m/tiny.gguf")
OK_REPLY: dict[str, Any] = {"tokens": [228], "tokens_predicted": 1, "content": "x"}
OK_BENCH = '[{"n_prompt": 16, "n_gen": 0, "avg_ts": 900.0}, {"n_prompt": 0, "n_gen": 4, "avg_ts": 300.0}]'
X64 = "load_backend: loaded CPU backend from /e/libggml-cpu-x64.so"


def crash(signo: int, *log: str) -> Program:
    return Program(listen_after=None, exit_after=0.5, exit_code=-signo, log=list(log))


def ends(code: int, *log: str) -> Program:
    return Program(listen_after=None, exit_after=0.5, exit_code=code, log=list(log))


DEFAULTS = {
    "llama-server": Program(listen_after=0.5, log=["srv llama_server: model loaded"]),
    "ggml-rpc-server": Program(listen_after=0.2, log=["Accepted client connection"]),
    "llama-bench": ends(0, X64, OK_BENCH),
}


class Smoke:
    """The smoke test's edges on a fake network: each binary behaves as the next of its queued
    programs (else as one that works); llama-server answers /completion with ``replies["local"]``,
    or ``replies["rpc"]`` when it offloads to an RPC server."""

    def __init__(self, programs: dict[str, list[Program]] | None = None, **replies: dict[str, Any]) -> None:
        self.net = FakeNodes()
        self.programs = {k: list(v) for k, v in (programs or {}).items()}
        self.replies = replies
        self.net.on_spawn.append(self._spawned)

    def _spawned(self, proc: FakeProcess) -> None:
        name = Path(proc.argv[0]).name
        queue = self.programs.get(name)
        proc.program = queue.pop(0) if queue else DEFAULTS[name]
        self.net.node(proc.node).append_log(proc.log, "".join(line + "\n" for line in proc.program.log))

    def _listener(self, url: str) -> FakeProcess | None:
        parts = urlsplit(url)
        return self.net.listener(parts.hostname or "", parts.port or 80)

    def _complete(self, url: str, body: dict[str, Any], timeout: float) -> dict[str, Any] | None:
        proc = self._listener(url)
        if proc is None:
            return None
        return dict(self.replies.get("rpc" if "--rpc" in proc.argv else "local", OK_REPLY))

    @property
    def edges(self) -> SmokeEdges:
        return SmokeEdges(
            node=self.net.node("local"),
            clock=self.net.clock,
            listening=lambda host, port: self.net.listener(host, port) is not None,
            health=lambda url: self._listener(url) is not None,
            complete=self._complete,
            log_dir=Path("/smoke"),
        )

    @property
    def calls(self) -> list[list[str]]:
        return [p.argv for p in self.net.spawned]


def verdicts(smoke: Smoke) -> dict[str, str]:
    return {c.name: c.verdict for c in smoke_test(BIN, BINARIES, MODEL, smoke.edges).checks}


def test_all_ok_names_the_chosen_cpu_variant() -> None:
    smoke = Smoke()
    report = smoke_test(BIN, BINARIES, MODEL, smoke.edges)
    assert report.ok and report.failed is None
    assert [c.name for c in report.checks] == ["server", "rpc", "bench"]
    assert report.cpu_variant == "x64"
    assert "server, rpc, bench ok" in report.summary()
    # The local check computes on the CPU only; the RPC check offloads every layer to the worker.
    server_argv, rpc_argv, head_argv, bench_argv = smoke.calls
    assert not smoke.net.running(), "every process of the smoke test is stopped"
    assert server_argv[server_argv.index("--device") + 1] == "none"
    assert rpc_argv[0].endswith("ggml-rpc-server") and rpc_argv[rpc_argv.index("-H") + 1] == "127.0.0.1"
    assert head_argv[head_argv.index("--rpc") + 1] == f"127.0.0.1:{rpc_argv[rpc_argv.index('-p') + 1]}"
    assert "-ngl" in head_argv and head_argv[head_argv.index("-ngl") + 1] == "99"
    assert bench_argv[0].endswith("llama-bench") and "json" in bench_argv


def test_a_server_killed_by_sigill_is_a_signal_verdict_with_its_last_log_lines() -> None:
    log = "llama threadpool init, n_threads = 1\nIllegal instruction"
    smoke = Smoke({"llama-server": [crash(4, *log.splitlines())]})
    report = smoke_test(BIN, BINARIES, MODEL, smoke.edges)
    bad = report.failed
    assert bad is not None and bad.name == "server" and bad.verdict == "signal"
    assert "SIGILL" in bad.detail and bad.log_tail[-1] == "Illegal instruction"
    assert "SIGILL" in report.summary() and "llama threadpool init" in report.summary()


@pytest.mark.parametrize(("code", "signo"), [(-4, 4), (132, 4), (139, 11), (1, None), (0, None), (None, None)])
def test_signal_of_reads_popen_and_shell_statuses(code: int | None, signo: int | None) -> None:
    assert signal_of(code) == signo


def test_timeout_exit_and_wrong_output() -> None:
    hung = Smoke({"llama-bench": [Program(listen_after=None)]})
    assert verdicts(hung)["bench"] == "timeout"
    assert not hung.net.running(), "the hung llama-bench is stopped"
    assert verdicts(Smoke({"llama-bench": [ends(1, "error: failed to load model")]}))["bench"] == "exit"
    assert verdicts(Smoke({"llama-bench": [ends(0, "[]")]}))["bench"] == "wrong-output"
    zero = '[{"avg_ts": 0}, {"avg_ts": 0}]'
    assert verdicts(Smoke({"llama-bench": [ends(0, zero)]}))["bench"] == "wrong-output"
    v = verdicts(Smoke(local={"tokens": [], "tokens_predicted": 0, "content": ""}))
    assert v["server"] == "wrong-output"
    never = Smoke({"llama-server": [Program(listen_after=None)]})
    assert verdicts(never)["server"] == "timeout"


def test_rpc_that_computes_another_token_is_wrong_output() -> None:
    smoke = Smoke(local={"tokens": [228], "tokens_predicted": 1}, rpc={"tokens": [17], "tokens_predicted": 1})
    report = smoke_test(BIN, BINARIES, MODEL, smoke.edges)
    bad = report.failed
    assert bad is not None and bad.name == "rpc" and bad.verdict == "wrong-output"
    assert "[17]" in bad.detail and "[228]" in bad.detail


def test_rpc_server_crash_is_blamed_on_the_rpc_server() -> None:
    smoke = Smoke({"ggml-rpc-server": [crash(11, "Accepted client connection", "Segmentation fault")]})
    report = smoke_test(BIN, BINARIES, MODEL, smoke.edges)
    bad = report.failed
    assert bad is not None and bad.name == "rpc" and bad.verdict == "signal"
    assert "ggml-rpc-server" in bad.detail and "SIGSEGV" in bad.detail
    # It died before listening: the head was never started against it.
    assert not any("--rpc" in argv for argv in smoke.calls)


def test_an_rpc_server_that_served_no_client_is_wrong_output() -> None:
    smoke = Smoke({"ggml-rpc-server": [Program(listen_after=0.2, log=["Starting RPC server"])]})
    report = smoke_test(BIN, BINARIES, MODEL, smoke.edges)
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
    ice = "load_backend: loaded CPU backend from /e/libggml-cpu-icelake.so"
    smoke = Smoke(
        {
            "llama-server": [crash(4, "Illegal instruction")],
            "llama-bench": [crash(4, amx.strip(), "Illegal instruction"), ends(0, ice, OK_BENCH)],
        }
    )
    lines: list[str] = []
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lines.append, edges=smoke.edges, model=MODEL)
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
    smoke = Smoke({"llama-server": [crash(4, "Illegal instruction")]})
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lambda _m: None, edges=smoke.edges, model=MODEL)
    assert not report.ok and disabled == {}
    prov = cpu_provenance(True, bin_dir, report, disabled)
    assert prov["cpu_build"] == "native" and "-march=native" in prov["cpu_tied_to"]


def test_a_crash_that_does_not_depend_on_the_variant_restores_it(tmp_path: Path) -> None:
    bin_dir = _variant_dir(tmp_path, ["x64", "zen4"])
    zen4 = ends(0, "load_backend: loaded CPU backend from /e/libggml-cpu-zen4.so", OK_BENCH)
    x64 = ends(0, X64, OK_BENCH)
    smoke = Smoke(
        {"llama-server": [crash(4, "Illegal instruction") for _ in range(6)], "llama-bench": [zen4, x64, zen4]}
    )
    lines: list[str] = []
    report, disabled = smoke_with_fallback(bin_dir, BINARIES, lines.append, edges=smoke.edges, model=MODEL)
    assert not report.ok and report.failed is not None and report.failed.name == "server"
    assert disabled == {} and cpu_variants(bin_dir) == ["x64", "zen4"]
    assert any("restored" in ln for ln in lines)
