"""The planner's "no memory bandwidth" note speaks the user's language: spec keys
(``device_kind`` / ``bandwidth_gbps``) for `plan -c SPEC`, ``device=`` / ``bw=`` for ``--node``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from gguf_factory import dense_llama
from splitserve.cli import _inspect  # noqa: F401  (registers `plan`)
from splitserve.cli._app import app

SPEC = """model = "{model}"
[[workers]]
name = "w1"
memory_gib = 8
[[workers]]
name = "w2"
port = 50053
memory_gib = 8
{extra}
"""


def _plan(tmp_path: Path, *args: str, extra: str = "") -> list[str]:
    model = tmp_path / "m.gguf"
    if not model.exists():
        dense_llama(model, n_layer=4, n_vocab=320)
    config = tmp_path / "c.toml"
    config.write_text(SPEC.format(model=model, extra=extra))
    res = CliRunner().invoke(app, ["plan", "-c", str(config), "--json", *args])
    assert res.exit_code == 0, res.output
    return [str(n) for n in json.loads(res.stdout)["estimated"]]


def test_spec_plan_asks_for_spec_keys(tmp_path: Path) -> None:
    notes = [n for n in _plan(tmp_path) if "no memory bandwidth" in n]
    assert notes == [
        'no memory bandwidth for w1, w2: set device_kind (e.g. "gb10") or bandwidth_gbps on those workers '
        "(or [head]) in the spec to get a decode bound"
    ]


def test_spec_keys_give_the_bound(tmp_path: Path) -> None:
    notes = _plan(tmp_path, extra="")
    assert any("no memory bandwidth" in n for n in notes)
    spec_with = SPEC.replace("memory_gib = 8\n", 'memory_gib = 8\ndevice_kind = "gb10"\n')
    model = tmp_path / "m.gguf"
    (tmp_path / "c.toml").write_text(spec_with.format(model=model, extra=""))
    res = CliRunner().invoke(app, ["plan", "-c", str(tmp_path / "c.toml"), "--json"])
    assert res.exit_code == 0, res.output
    assert not any("no memory bandwidth" in str(n) for n in json.loads(res.stdout)["estimated"])


def test_node_flags_keep_their_own_syntax(tmp_path: Path) -> None:
    notes = [n for n in _plan(tmp_path, "--node", "w1=8", "--node", "w2=8") if "no memory bandwidth" in n]
    assert notes == ["no memory bandwidth for w1, w2: give device= or bw= to get a decode bound"]
