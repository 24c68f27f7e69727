"""The README says what the code does: its flagship two-Spark spec parses and `up --dry-run`
puts every worker on the host its ``host`` names; its key table lists every spec key, and only
spec keys."""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
import subprocess
import tomllib
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from typer.testing import CliRunner

from gguf_factory import dense_llama
from splitserve.cli import _cluster as cli_cluster
from splitserve.cli._app import app
from splitserve.cluster import FakeNetwork, gather_facts
from splitserve.cluster._spec import ClusterSpec
from splitserve.engine import FakeEngine

README = Path(__file__).resolve().parents[2] / "README.md"
ENGINE_FILES = {"llama-server": b"server", "ggml-rpc-server": b"rpc", "libggml-base.so": b"ggml"}


def readme_spec() -> tuple[str, dict[str, Any]]:
    """The README's ``# cluster.toml`` block: its text and its TOML."""
    blocks = re.findall(r"```toml\n(.*?)```", README.read_text(), re.S)
    (text,) = [b for b in blocks if b.startswith("# cluster.toml")]
    return text, tomllib.loads(text)


def test_every_worker_has_a_host_and_a_remote_one_binds_the_private_link() -> None:
    _, data = readme_spec()
    assert len(data["workers"]) == 2
    for w in data["workers"]:
        assert "host" in w, f"worker {w['name']} has no host"
    remote = [w for w in data["workers"] if w["host"] != "local"]
    assert remote and all(w["bind"] != "127.0.0.1" for w in remote)


def _engine(root: Path) -> Path:
    (root / "bin").mkdir(parents=True)
    for name, blob in ENGINE_FILES.items():
        (root / "bin" / name).write_bytes(blob)
    prov = {
        "key": "b4000-cpu",
        "backend": "cpu",
        "bin_dir": "bin",
        "binaries": {"server": "llama-server", "rpc_server": "ggml-rpc-server"},
        "rpc_protocol": "3.0.0",
    }
    (root / "engine.json").write_text(json.dumps(prov))
    return root


def test_dry_run_puts_each_worker_where_its_host_says(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`splitserve up -c cluster.toml --dry-run` on the README's spec, with the model where the
    README says (``~`` a test home) and the remote node answered by a FakeNetwork."""
    text, data = readme_spec()
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPLITSERVE_STATE", str(tmp_path / "state"))
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    model = Path(data["model"]).expanduser()
    assert model.is_relative_to(home)
    model.parent.mkdir(parents=True)
    dense_llama(model, n_layer=4, n_vocab=320)
    config = tmp_path / "cluster.toml"
    config.write_text(f'engine = "{_engine(tmp_path / "engine")}"\n' + text)

    net = FakeNetwork()
    sums = "".join(f"{hashlib.sha256(d).hexdigest()}  {n}\n" for n, d in ENGINE_FILES.items() if n != "llama-server")
    for w in data["workers"]:
        if w["host"] != "local":
            net.node(w["host"]).answers.append(("sha256sum", subprocess.CompletedProcess([], 0, sums.encode(), b"")))

    def on_fakes(spec: Any, *args: Any, **kwargs: Any) -> Any:
        kwargs["edges"] = net.edges(FakeEngine())
        return gather_facts(spec, *args, **kwargs)

    monkeypatch.setattr(cli_cluster, "gather_facts", on_fakes)
    res = CliRunner().invoke(app, ["up", "-c", str(config), "--dry-run", "--skip-preflight"])
    assert res.exit_code == 0, res.output
    lines = res.stdout.splitlines()
    placed = {}
    for i, line in enumerate(lines):
        m = re.fullmatch(r"# \d+\. (\S+): start ggml-rpc-server on (\S+):(\d+)", line)
        if m:
            where = re.fullmatch(r"#    on (\S+), log .+", lines[i + 1])
            assert where, lines[i + 1]
            placed[m.group(1)] = (where.group(1), m.group(2), int(m.group(3)))
    assert placed == {w["name"]: (w["host"], w.get("bind", "127.0.0.1"), w["port"]) for w in data["workers"]}
    assert net.spawned == [], "the dry-run starts nothing"


# -- the key table ---------------------------------------------------------------------------

#: tables the README names as a whole (``vllm.*``): their keys are in their own docs page
WHOLE_TABLES = {"vllm", "sglang"}


def spec_keys(model: type[BaseModel] = ClusterSpec, prefix: str = "") -> set[str]:
    """Every key a spec file may hold, as the README writes it (``workers[].port``)."""
    keys: set[str] = set()
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        models = [
            a
            for a in (field.annotation, *typing.get_args(field.annotation))
            if isinstance(a, type) and issubclass(a, BaseModel)
        ]
        list_of = typing.get_origin(field.annotation) is list
        key = prefix + name
        if models and name not in WHOLE_TABLES:
            keys |= spec_keys(models[0], key + ("[]." if list_of else "."))
        else:
            keys.add(key + (".*" if name in WHOLE_TABLES else ""))
    return keys


def readme_keys() -> set[str]:
    """The first column of the README's spec reference table, expanded: ``a` / `b`` is two keys,
    ``server.cache_type_k` / `_v`` ends the first one differently, ``workers[].engine`, `.env``
    is a sibling, ``server.spec_*`` a pattern."""
    text = README.read_text()
    table = text[text.index("### Spec reference") :]
    table = table[table.index("| key |") :]
    keys: set[str] = set()
    for row in table.splitlines()[2:]:
        if not row.startswith("|"):
            break
        last = ""
        for token in re.findall(r"`([^`]+)`", row.split("|")[1]):
            if token.startswith("."):
                key = last.rsplit(".", 1)[0] + token
            elif token.startswith("_"):
                key = last.rsplit("_", 1)[0] + token
            else:
                key = token
            keys.add(key)
            last = key
    return keys


def test_readme_key_table_lists_every_spec_key() -> None:
    documented = readme_keys()
    patterns = [k for k in documented if "*" in k and not k.endswith(".*")]
    missing = sorted(k for k in spec_keys() if k not in documented and not any(fnmatch.fnmatch(k, p) for p in patterns))
    assert missing == [], f"spec keys missing from the README's table: {missing}"


def test_readme_key_table_names_no_key_that_does_not_exist() -> None:
    real = spec_keys()
    unknown = sorted(
        k for k in readme_keys() if k not in real and not ("*" in k and any(fnmatch.fnmatch(r, k) for r in real))
    )
    assert unknown == [], f"the README's table names keys the spec rejects: {unknown}"
