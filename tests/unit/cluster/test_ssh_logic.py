"""The SSH transport's pure parts: remote path quoting, ssh options, env filtering, exit status."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from splitserve._node import remote_env, sh_path
from splitserve._ssh import exit_status_from_log
from splitserve.cluster import LocalNode, SshNode, node_for, parse_spec


@pytest.mark.parametrize(
    ("path", "home_relative"),
    [("~/.cache/splitserve/x", ".cache/splitserve/x"), ("rel/dir", "rel/dir"), ("/opt/llama/bin", None)],
)
def test_remote_paths_expand_against_the_remote_home(path: str, home_relative: str | None, tmp_path: Path) -> None:
    out = subprocess.run(
        ["sh", "-c", f"printf %s {sh_path(path)}"], capture_output=True, text=True, env={"HOME": str(tmp_path)}
    ).stdout
    assert out == (f"{tmp_path}/{home_relative}" if home_relative else path)


def test_sh_path_quotes_spaces_and_metacharacters(tmp_path: Path) -> None:
    path = "~/dir with space/$(touch pwned)"
    out = subprocess.run(
        ["sh", "-c", f"printf %s {sh_path(path)}"],
        capture_output=True,
        text=True,
        env={"HOME": str(tmp_path)},
        cwd=tmp_path,
    ).stdout
    assert out == f"{tmp_path}/dir with space/$(touch pwned)"
    assert not (tmp_path / "pwned").exists()


def test_ssh_argv_never_prompts_and_multiplexes(tmp_path: Path) -> None:
    t = SshNode("user@box2", config=tmp_path / "cfg", options=["ProxyJump=bastion"], connect_timeout=3)
    argv = t.ssh_argv()
    assert argv[0] == "ssh" and argv[-1] == "user@box2" and argv[argv.index("-F") + 1] == str(tmp_path / "cfg")
    opts = [argv[i + 1] for i, a in enumerate(argv) if a == "-o"]
    assert "BatchMode=yes" in opts and "ConnectTimeout=3" in opts and "ControlMaster=auto" in opts
    assert any(o.startswith("ControlPath=") and o.endswith("/%C") for o in opts)
    assert "ProxyJump=bastion" in opts


def test_node_for_picks_local_or_ssh_and_shares_instances() -> None:
    assert isinstance(node_for("local"), LocalNode)
    spec = parse_spec(
        {
            "model": "/m.gguf",
            "ssh": {"options": ["Port=2222"]},
            "workers": [{"name": "w1", "host": "user@box2", "bind": "10.0.0.2"}],
        }
    )
    a = node_for("user@box2", spec.ssh)
    assert isinstance(a, SshNode) and a.options == ["Port=2222"]
    assert node_for("user@box2", spec.ssh.model_copy()) is a  # the same settings, read back from a state file
    assert node_for("user@box2") is not a


def test_remote_env_drops_what_this_machine_already_has(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/local/lib")
    monkeypatch.setenv("HOME", "/root")
    env = dict(os.environ, LD_LIBRARY_PATH="/remote/bin:/local/lib", GGML_X="1")
    assert remote_env(env) == {"LD_LIBRARY_PATH": "/remote/bin", "GGML_X": "1"}
    assert remote_env({"LD_LIBRARY_PATH": "/remote/bin"}) == {"LD_LIBRARY_PATH": "/remote/bin"}


def test_exit_status_from_the_wrappers_log_line() -> None:
    assert exit_status_from_log("hello\n") is None
    assert exit_status_from_log("x\n# splitserve: exit status 0\n") == 0
    assert exit_status_from_log("# splitserve: exit status 1\nagain\n# splitserve: exit status 137\n") == -9
    assert exit_status_from_log("# splitserve: exit status 134") == -6


def test_remote_worker_log_and_engine_paths_are_the_nodes() -> None:
    from splitserve.cluster import launch_plan
    from splitserve.cluster._distribute import node_engine
    from splitserve.engine import Engine

    spec = parse_spec(
        {
            "name": "c",
            "model": "/m.gguf",
            "state_dir": "/st",
            "workers": [
                {"name": "w1", "host": "box2", "bind": "10.0.0.2"},
                {"name": "w2", "host": "box3", "bind": "10.0.0.3", "workdir": "/srv/ss"},
            ],
        }
    )
    local = Engine(
        root=Path("/eng"),
        bin_dir=Path("/eng/bin"),
        provenance={"key": "k1", "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"}},
    )
    engines = {
        "head": local,
        "w1": node_engine(spec.workers[0], local),
        "w2": node_engine(spec.workers[1], None, "~/llama.cpp/build/bin"),
    }
    plan = launch_plan(spec, engines)
    w1, w2 = plan.workers
    assert w1.argv[0] == "~/.cache/splitserve/engines/k1/ggml-rpc-server"
    assert w1.env["LD_LIBRARY_PATH"] == "~/.cache/splitserve/engines/k1"
    assert str(w1.log) == "~/.cache/splitserve/clusters/c/logs/w1.log"
    assert w2.argv[0] == "~/llama.cpp/build/bin/ggml-rpc-server" and str(w2.log) == "/srv/ss/clusters/c/logs/w2.log"
    assert plan.head.log == Path("/st/logs/head.log")
