"""An unknown spec key is one line naming the file, the key, its table and, when one is close,
the key meant (``device`` -> ``devices`` or ``device_kind``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve._errors import SpecError
from splitserve.cluster import load_spec

BASE = 'model = "m.gguf"\n'


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            '[[workers]]\nname = "spark2"\ndevice = "gb10"\n',
            "workers[spark2].device: unknown key in [[workers]]; did you mean devices or device_kind?",
        ),
        (
            '[[workers]]\nname = "w1"\nbandwidth = 273\n',
            "workers[w1].bandwidth: unknown key in [[workers]]; did you mean bandwidth_gbps?",
        ),
        (
            '[[workers]]\nname = "w1"\n[server]\nctx = 4096\n',
            "server.ctx: unknown key in [server]; did you mean ctx_size?",
        ),
        ('modle = "x"\n[[workers]]\nname = "w1"\n', "modle: unknown key at the top level; did you mean model?"),
        (
            '[head]\ndevice_kin = "h200"\n[[workers]]\nname = "w1"\n',
            "head.device_kin: unknown key in [head]; did you mean device_kind?",
        ),
        (
            '[[workers]]\nname = "w1"\n[gateway]\napikey = "k"\n',
            "gateway.apikey: unknown key in [gateway]; did you mean api_key?",
        ),
    ],
)
def test_did_you_mean(tmp_path: Path, body: str, expected: str) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(BASE + body)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg == f"{path}: {expected}"
    assert "\n" not in msg


def test_nothing_close_lists_the_table_keys(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(BASE + '[[workers]]\nname = "w1"\nzzz = 1\n')
    with pytest.raises(SpecError) as info:
        load_spec(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: workers[w1].zzz: unknown key in [[workers]]; allowed: bandwidth_gbps, bind, cache,")
    assert "did you mean" not in msg and "\n" not in msg


def test_device_kind_and_bandwidth_are_spec_keys(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text(
        BASE + '[head]\ndevice_kind = "gb10"\n[[workers]]\nname = "w1"\ndevice_kind = "gb10"\nbandwidth_gbps = 273\n'
    )
    spec = load_spec(path)
    assert spec.workers[0].device_kind == "gb10" and spec.workers[0].bandwidth_gbps == 273
