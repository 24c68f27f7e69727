"""`up --dry-run` prints what `up` runs: for several specs, the command lines the CLI's dry-run
prints are exactly the argv the real `up` then starts on a :class:`FakeNetwork` (host, log and
order included), and the dry-run itself starts nothing.

Both go through the real code: the dry-run through `splitserve up --dry-run` (typer's CliRunner),
whose ``gather_facts`` is only handed the fake network's edges (the CLI has no such argument);
`up` through :func:`splitserve.cluster.up` with the same edges. The engine is an engine folder on
disk named by the spec, the model a synthetic GGUF (the planner reads its headers).
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from gguf_factory import dense_llama
from splitserve.cli import _cluster as cli_cluster
from splitserve.cli._app import app
from splitserve.cluster import FakeNetwork, gather_facts, load_spec, up
from splitserve.engine import FakeEngine

ENGINE_FILES = {"llama-server": b"server", "ggml-rpc-server": b"rpc", "libggml-base.so": b"ggml"}

LOCAL_2 = """
[[workers]]
name = "w1"
port = 50100

[[workers]]
name = "w2"
port = 50101
"""

PLANNER_SPLIT = """
[server]
ctx_size = 2048

[[workers]]
name = "w1"
port = 50100
memory_gib = 8

[[workers]]
name = "w2"
port = 50101
memory_gib = 24
"""

THREE_NODES = """
drop_caches = true

[ssh]
options = ["-o", "ControlMaster=auto"]

[server]
ctx_size = 4096
parallel = 2

[[workers]]
name = "spark2"
host = "spark2"
bind = "10.20.20.2"

[[workers]]
name = "spark3"
host = "spark3"
bind = "10.20.20.3"
threads = 8
"""

SPECULATION = """
[server]
speculation = "ngram-mod"
spec_ngram_mod_n_match = 24
batch = 1024

[gateway]
model_name = "smol"
max_concurrent = 4

[[workers]]
name = "w1"
port = 50100
"""

REPLICAS_1 = """
topology = "replicas"

[[workers]]
name = "spark2"
host = "spark2"
bind = "10.20.20.2"

[[workers]]
name = "spark3"
host = "spark3"
bind = "10.20.20.3"
"""

REPLICAS_2 = """
topology = "replicas:2"

[[workers]]
name = "spark2"
host = "spark2"
bind = "10.20.20.2"

[[workers]]
name = "spark3"
host = "spark3"
bind = "10.20.20.3"

[[workers]]
name = "spark4"
host = "spark4"
bind = "10.20.20.4"
"""

SPECS = {
    "local-2workers": LOCAL_2,
    "planner-split": PLANNER_SPLIT,
    "3-nodes": THREE_NODES,
    "speculation": SPECULATION,
    "replicas-of-1": REPLICAS_1,
    "replicas-of-2": REPLICAS_2,
}


def engine_folder(root: Path) -> Path:
    bin_dir = root / "bin"
    bin_dir.mkdir(parents=True)
    for name, data in ENGINE_FILES.items():
        (bin_dir / name).write_bytes(data)
    provenance = {
        "key": "b4000-cpu",
        "backend": "cpu",
        "bin_dir": "bin",
        "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"},
        "rpc_protocol": "3.0.0",
    }
    (root / "engine.json").write_text(json.dumps(provenance))
    return root


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model, engine folder), made once: a small vocabulary keeps reading the headers quick."""
    root = tmp_path_factory.mktemp("agree")
    (model,) = dense_llama(root / "m.gguf", n_layer=4, n_vocab=320)
    return model, engine_folder(root / "engine")


@pytest.fixture()
def write_spec(tmp_path: Path, shared: tuple[Path, Path]) -> Callable[[str], Path]:
    model, engine = shared

    def write(body: str) -> Path:
        head = f'name = "agree"\nmodel = "{model}"\nengine = "{engine}"\nstate_dir = "{tmp_path / "st"}"\n'
        path = tmp_path / "cluster.toml"
        path.write_text(head + body)
        return path

    return write


def fake_network() -> FakeNetwork:
    """Remote workers whose copy of the engine matches the head's (sha256), so `up` copies nothing."""
    net = FakeNetwork()
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in ENGINE_FILES.items() if n != "llama-server")
    for host in ("spark2", "spark3"):
        net.node(host).answers.append(("sha256sum", subprocess.CompletedProcess([], 0, sums.encode(), b"")))
    # spark4 (and a worker that serves a replica, which needs llama-server's files): every file there
    every = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in ENGINE_FILES.items())
    for host in ("spark2", "spark3", "spark4"):
        net.node(host).answers.insert(0, ("llama-server", subprocess.CompletedProcess([], 0, every.encode(), b"")))
        net.node(host).answers.append(("sha256sum", subprocess.CompletedProcess([], 0, every.encode(), b"")))
    return net


HOME = "/home/splitserve-test"


def shell_words(line: str) -> list[str]:
    """The words a real bash makes of a printed line (``~``/``$HOME`` expanded with HOME as
    above, nothing run), the environment assignments in front dropped."""
    script = 'words() { printf "%s\\0" "$@"; }; eval "words $1"'
    res = subprocess.run(
        ["bash", "-c", script, "bash", line],
        capture_output=True,
        check=True,
        env={"HOME": HOME, "PATH": "/usr/bin:/bin"},
    )
    words = res.stdout.decode().split("\0")[:-1]
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words.pop(0)  # the environment the command runs with
    return words


def printed_commands(output: str) -> list[tuple[str, str, list[str]]]:
    """(host, log, argv) of every start step of a dry-run's output, in order, as a shell on that
    host runs it (a remote argv's ``~/`` is that node's home)."""
    lines = output.splitlines()
    out = []
    for i, line in enumerate(lines):
        m = re.fullmatch(r"#    on (\S+), log (.+)", line)
        if m:
            out.append((m.group(1), m.group(2), shell_words(lines[i + 1])))
    return out


def home(argv: list[str]) -> list[str]:
    """An argv as the node's shell sees it: a leading ``~/`` is the home folder."""
    return [HOME + a[1:] if a.startswith("~/") else a for a in argv]


def dry_run(monkeypatch: pytest.MonkeyPatch, config: Path, net: FakeNetwork) -> tuple[str, list[dict[str, Any]]]:
    calls: list[dict[str, Any]] = []

    def on_fakes(spec: Any, *args: Any, **kwargs: Any) -> Any:
        calls.append(dict(kwargs))
        kwargs["edges"] = net.edges(FakeEngine())
        return gather_facts(spec, *args, **kwargs)

    monkeypatch.setattr(cli_cluster, "gather_facts", on_fakes)
    res = CliRunner().invoke(app, ["up", "-c", str(config), "--dry-run", "--skip-preflight"])
    assert res.exit_code == 0, res.output
    return res.stdout, calls


@pytest.mark.parametrize("name", list(SPECS))
def test_up_runs_exactly_what_the_dry_run_printed(
    name: str, write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_spec(SPECS[name])
    net = fake_network()
    printed, calls = dry_run(monkeypatch, config, net)
    assert len(calls) == 1 and calls[0].get("plan_split") is True, "the dry-run plans the split like up"
    assert net.spawned == [], "the dry-run starts nothing"

    up(load_spec(config), preflight=False, edges=net.edges(FakeEngine()))
    ran = [(p.node, str(p.log), home(p.argv)) for p in net.spawned]
    assert printed_commands(printed) == ran


def test_the_planners_split_is_printed_as_up_passes_it(
    write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_spec(PLANNER_SPLIT)
    net = fake_network()
    printed, _ = dry_run(monkeypatch, config, net)
    up(load_spec(config), preflight=False, edges=net.edges(FakeEngine()))
    (head,) = [p.argv for p in net.spawned if Path(p.argv[0]).name == "llama-server"]
    split = head[head.index("--tensor-split") + 1]
    w1, w2 = (float(x) for x in split.split(","))
    assert 0 < w1 < w2, "the 24 GiB worker gets the larger share"
    (printed_head,) = [argv for _h, _l, argv in printed_commands(printed) if argv[0].endswith("llama-server")]
    assert printed_head[printed_head.index("--tensor-split") + 1] == split


def test_the_three_node_dry_run_shows_the_engine_check_and_the_cache_drops(
    write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    config = write_spec(THREE_NODES)
    net = fake_network()
    printed, _ = dry_run(monkeypatch, config, net)
    steps = [ln for ln in printed.splitlines() if re.match(r"# \d+\. ", ln)]
    assert any("spark2: engine present on spark2: 2 files match the head's build (sha256)" in s for s in steps)
    assert [s.split(": ", 1)[0].split(". ", 1)[1] for s in steps if "drop the page cache" in s] == [
        "local",
        "spark2",
        "spark3",
    ]
    hosts = [h for h, _l, _a in printed_commands(printed)]
    assert hosts == ["local", "spark2", "spark3", "local"]


@pytest.mark.parametrize("name", list(SPECS))
def test_every_dry_run_line_is_valid_shell(
    name: str, write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    printed, _ = dry_run(monkeypatch, write_spec(SPECS[name]), fake_network())
    for line in printed.splitlines():
        res = subprocess.run(["bash", "-n", "-c", line], capture_output=True, text=True)
        assert res.returncode == 0, f"{line!r}: {res.stderr}"


def test_a_remote_line_expands_the_tilde_on_the_node(
    write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    printed, _ = dry_run(monkeypatch, write_spec(THREE_NODES), fake_network())
    (line,) = [ln for ln in printed.splitlines() if "-H 10.20.20.2" in ln]
    assert "'~" not in line and "~/" not in line, line
    assert line.startswith('LD_LIBRARY_PATH="$HOME"/.cache/splitserve/engines/b4000-cpu"${LD_LIBRARY_PATH:+')
    assert shell_words(line)[0] == f"{HOME}/.cache/splitserve/engines/b4000-cpu/ggml-rpc-server"


def test_replicas_dry_run_prints_the_topology_and_starts_a_server_per_replica(
    write_spec: Callable[[str], Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    printed, _ = dry_run(monkeypatch, write_spec(REPLICAS_2), fake_network())
    lines = printed.splitlines()
    assert lines[0] == "# topology: 2 replicas of 2 (head+spark2, spark3+spark4)"
    assert lines[1].startswith("#   why: asked for in the spec")
    started = [(h, argv) for h, _l, argv in printed_commands(printed)]
    gateway = next(argv for _h, argv in started if "serve" in argv)
    assert gateway[gateway.index("--engine") + 1] == "head=http://127.0.0.1:8080,spark3=http://10.20.20.3:50052"
    servers = [(h, argv) for h, argv in started if argv[0].endswith("llama-server")]
    assert [(h, a[a.index("--host") + 1], a[a.index("--rpc") + 1]) for h, a in servers] == [
        ("local", "127.0.0.1", "10.20.20.2:50052"),
        ("spark3", "10.20.20.3", "10.20.20.4:50052"),
    ]
    rpc = [h for h, argv in started if argv[0].endswith("ggml-rpc-server")]
    assert rpc == ["spark2", "spark4"], "spark3 serves its replica instead of RPC"


# -- vLLM (native and on Ray) and SGLang: the same plan, printer and executor -------------------

ENGINE_NODES = """
[[workers]]
name = "spark2"
host = "spark2"
bind = "10.20.20.2"
"""

ENGINE_SPECS = {
    "vllm-native": ("vllm", ENGINE_NODES + '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\ntensor_parallel_size = 2\n'),
    "vllm-ray": (
        "vllm",
        ENGINE_NODES + '[vllm]\nmodel = "Qwen/Qwen3-0.6B"\ntensor_parallel_size = 2\nlauncher = "ray"\n',
    ),
    "sglang": ("sglang", ENGINE_NODES + '[sglang]\nmodel = "Qwen/Qwen3-0.6B"\ntensor_parallel_size = 2\n'),
}


def engine_network() -> FakeNetwork:
    """Two nodes on 10.20.20.0/24 that answer the facts script: vLLM / SGLang 0.11.0 and Ray 2.60.0
    next to /venv/bin/python, one GPU each."""
    from splitserve.cluster._engines_facts import FACT_MARK

    net = FakeNetwork()
    for host, address in (("local", "10.20.20.1"), ("spark2", "10.20.20.2")):
        nic = json.dumps(
            [{"ifname": "enp1s0", "mtu": 9000, "operstate": "UP", "addr_info": [{"local": address, "prefixlen": 24}]}]
        )
        sections = [
            ("nic", 0, nic),
            ("engine", 0, "0.11.0"),
            ("ray", 0, "ray, version 2.60.0"),
            ("gpus", 0, "GPU 0: NVIDIA H100 (UUID: GPU-0)"),
            ("gds", 1, ""),
        ]
        out = "".join(f"{FACT_MARK}{k}\n{text}\n@@splitserve-rc {rc}\n" for k, rc, text in sections)
        net.node(host).answers.append((FACT_MARK, subprocess.CompletedProcess(["sh"], 0, out.encode(), b"")))
    return net


@pytest.mark.parametrize("name", list(ENGINE_SPECS))
def test_vllm_and_sglang_up_runs_exactly_what_the_dry_run_printed(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend, body = ENGINE_SPECS[name]
    config = tmp_path / "cluster.toml"
    head = f'name = "agree"\nbackend = "{backend}"\nstate_dir = "{tmp_path / "st"}"\n'
    config.write_text(
        head
        + body.replace("[vllm]\n", '[vllm]\npython = "/venv/bin/python"\n').replace(
            "[sglang]\n", '[sglang]\npython = "/venv/bin/python"\n'
        )
    )
    net = engine_network()
    printed, calls = dry_run(monkeypatch, config, net)
    assert len(calls) == 1 and net.spawned == [], "the dry-run gathers the facts once and starts nothing"
    assert re.search(r"^# fix: NCCL_SOCKET_IFNAME", printed, re.M), "the fixes written are printed"
    assert "/v1/completions streams a token (not /health)" in printed

    def token(url: str, _model: str, _key: str | None) -> str | None:
        host, port = url.removeprefix("http://").rsplit(":", 1)
        return "Hi" if net.listener(host, int(port)) is not None else None

    state = up(load_spec(config), preflight=False, edges=net.edges(FakeEngine()), first_token=token)
    assert state.phase == "ready"
    ran = [(p.node, str(p.log), home(p.argv)) for p in net.spawned]
    assert printed_commands(printed) == ran
    roles = [p.role for p in state.processes]
    assert (
        roles
        == {
            "vllm-native": ["vllm", "vllm_headless", "gateway"],
            "vllm-ray": ["ray_head", "ray_worker", "vllm", "gateway"],
            "sglang": ["sglang", "sglang", "gateway"],
        }[name]
    )
