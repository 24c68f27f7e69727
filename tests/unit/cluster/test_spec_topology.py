"""``topology`` and ``replica_nodes``: what the spec accepts, and one line naming file and key for
what it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from splitserve._errors import SpecError
from splitserve.cluster import load_spec

BASE = 'model = "m.gguf"\n'
WORKER = '[[workers]]\nname = "w1"\n'


def _load(tmp_path: Path, body: str):  # type: ignore[no-untyped-def]
    path = tmp_path / "c.toml"
    path.write_text(BASE + body + WORKER)
    return load_spec(path)


@pytest.mark.parametrize(
    ("body", "asked"),
    [
        ("", ("auto", None)),
        ('topology = "split"\n', ("split", None)),
        ('topology = "replicas"\n', ("replicas", None)),
        ('topology = "replicas:2"\n', ("replicas", 2)),
        ('topology = "replicas"\nreplica_nodes = 3\n', ("replicas", 3)),
        ("replica_nodes = 1\n", ("auto", 1)),
    ],
)
def test_topology_asked(tmp_path: Path, body: str, asked: tuple[str, int | None]) -> None:
    assert _load(tmp_path, body).topology_asked == asked


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        (
            'topology = "mesh"\n',
            "topology: 'mesh' is not one of: auto, split, replicas, replicas:K (K nodes per replica, K >= 1)",
        ),
        ('topology = "replicas:0"\n', "topology: 'replicas:0' is not one of"),
        ('topology = "split:2"\n', "topology: 'split:2' is not one of"),
        ("replica_nodes = 0\n", "replica_nodes: Input should be greater than or equal to 1"),
        ('topology = "split"\nreplica_nodes = 2\n', 'replica_nodes: only with topology = "replicas" or "auto"'),
        ('topology = "replicas:2"\nreplica_nodes = 3\n', "topology = 'replicas:2' and replica_nodes = 3 disagree"),
    ],
)
def test_bad_topology_is_one_line_naming_file_and_key(tmp_path: Path, body: str, expected: str) -> None:
    with pytest.raises(SpecError) as exc:
        _load(tmp_path, body)
    msg = str(exc.value)
    assert "\n" not in msg
    assert msg.startswith(f"{tmp_path / 'c.toml'}: ")
    assert expected in msg


def test_replicas_of_one_node_with_vllm_load(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text('backend = "vllm"\ntopology = "replicas"\n[vllm]\nmodel = "m"\n')
    assert load_spec(path).topology_asked == ("replicas", None)


def test_replicas_of_more_nodes_than_there_are_is_refused_before_anything_starts(tmp_path: Path) -> None:
    from splitserve._errors import UsageError
    from splitserve.cluster import check_startable

    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    path = tmp_path / "c.toml"
    path.write_text(
        'model = "m.gguf"\ntopology = "replicas:3"\n[[workers]]\nname = "w1"\nhost = "box2"\nbind = "10.9.0.2"\n'
    )
    with pytest.raises(UsageError) as exc:
        check_startable(load_spec(path))
    assert str(exc.value) == (
        f"{path}: topology: replicas of 3 nodes, but the spec has 2 (head, w1: the head's machine and each "
        "worker's host); give 1 to 2"
    )
