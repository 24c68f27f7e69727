"""The preflight rows of a vLLM / SGLang spec's node facts, pure: :func:`backend_checks`
(``engine``, ``nic``, ``gpus``, ``ray``), what `splitserve preflight` shows (with the ``ssh``,
``model`` and ``ports`` rows :func:`~._engines_facts.engine_preflight` adds) and what the
``preflight`` step of `up`'s plan reports. Kept apart from :mod:`._preflight`, llama.cpp's
checks, which do their own I/O."""

from __future__ import annotations

from ._checks import CheckRow
from ._engines_plan import EngineFacts
from ._parallel_sizes import with_parallel_sizes
from ._spec import ClusterSpec
from ._spec_engines import VllmSpec, engine_table, gpus_per_rank_node, node_names, server_groups, spec_gpus


def backend_checks(spec: ClusterSpec, facts: EngineFacts) -> list[CheckRow]:
    """Preflight rows for a vLLM / SGLang spec: ``engine`` (importable everywhere, one version),
    ``nic`` (the private link's interface found and up, its MTU), ``gpus`` (per node against the
    parallel sizes) and, for the Ray launcher, ``ray`` (one version everywhere)."""
    spec = with_parallel_sizes(spec, {n.name: n.gpus for n in facts.nodes}, facts.shape)[0]
    table = engine_table(spec)
    if table is None:
        return []
    names = node_names(spec)
    nodes = [facts.node(n) for n in names]
    module = spec.backend
    rows: list[CheckRow] = []
    # engine
    versions = {n.engine_version for n in nodes if n.engine_version}
    want = _majority([n.engine_version for n in nodes if n.engine_version])
    probe = isinstance(table, VllmSpec) and table.ray_probe
    for n in nodes:
        if probe:
            rows.append(CheckRow("engine", n.name, "skip", f"ray_probe: {module} is not started"))
        elif n.engine_version is None:
            rows.append(
                CheckRow("engine", n.name, "fail", f"{module} does not import with {n.python}", f"pip install {module}")
            )
        elif len(versions) > 1 and n.engine_version != want:
            rows.append(
                CheckRow(
                    "engine",
                    n.name,
                    "fail",
                    f"{module} {n.engine_version} here, {want} on the other nodes",
                    f"pip install {module}=={want}",
                )
            )
        else:
            rows.append(CheckRow("engine", n.name, "pass", f"{module} {n.engine_version}"))
    # nic
    ray = isinstance(table, VllmSpec) and table.launcher == "ray"
    if len(nodes) > 1 or ray:
        mtus = {n.mtu for n in nodes if n.mtu is not None}
        for n in nodes:
            override = table.nic if isinstance(table.nic, str) else (table.nic or {}).get(n.name)
            fix = f"give the node's private-link address ({'head_bind' if n.name == 'head' else 'bind'})"
            if n.interface is None:
                rows.append(CheckRow("nic", n.name, "fail", f"no interface holds {n.address}", fix))
                continue
            if override and override != n.interface:
                rows.append(
                    CheckRow(
                        "nic",
                        n.name,
                        "warn",
                        f"{module}.nic = {override!r} but {n.address} is on {n.interface}",
                        "drop the nic override or fix the address",
                    )
                )
                continue
            state = (n.operstate or "unknown").upper()
            detail = f"{n.interface} ({n.address}), {state}, mtu {n.mtu or '?'}"
            if state == "DOWN":
                rows.append(CheckRow("nic", n.name, "fail", detail, f"sudo ip link set {n.interface} up"))
            elif len(mtus) > 1:
                rows.append(
                    CheckRow(
                        "nic",
                        n.name,
                        "warn",
                        f"{detail}; MTUs differ across nodes ({', '.join(str(m) for m in sorted(mtus))})",
                        "give every node's link the same MTU (9000 on a direct QSFP link)",
                    )
                )
            elif state != "UP":
                rows.append(CheckRow("nic", n.name, "warn", detail, "check the link (`ip link show`)"))
            else:
                rows.append(CheckRow("nic", n.name, "pass", detail))
    # gpus
    group = len(server_groups(spec)[0])
    per_node = gpus_per_rank_node(table, group)
    world = table.world_size
    given = spec_gpus(spec)
    counts = {n.name: given[n.name] if given[n.name] is not None else n.gpus for n in nodes}
    for n in nodes:
        have = counts[n.name]
        if probe:
            rows.append(CheckRow("gpus", n.name, "skip", "ray_probe: the probe needs no GPUs"))
        elif have is None:
            rows.append(CheckRow("gpus", n.name, "skip", "nvidia-smi not found; GPU count unknown"))
        elif per_node is not None and have < per_node:
            rows.append(
                CheckRow(
                    "gpus",
                    n.name,
                    "fail",
                    f"{have} GPU(s); tensor x pipeline x data parallel = {world} over {group} node(s) "
                    f"needs {per_node} per node",
                    "lower the parallel sizes or add GPUs",
                )
            )
        elif per_node is None and all(c is not None for c in counts.values()):
            total = sum(c or 0 for c in counts.values())
            status = "pass" if total >= world else "fail"
            rows.append(
                CheckRow(
                    "gpus",
                    n.name,
                    status,
                    f"{have} GPU(s); the Ray cluster has {total} for a world of {world}",
                    "" if status == "pass" else "lower the parallel sizes or add GPUs",
                )
            )
        else:
            rows.append(CheckRow("gpus", n.name, "pass", f"{have} GPU(s)"))
    # ray
    if ray:
        rv = _majority([n.ray_version for n in nodes if n.ray_version])
        versions = {n.ray_version for n in nodes if n.ray_version}
        for n in nodes:
            if n.ray_version is None:
                rows.append(CheckRow("ray", n.name, "fail", f"no ray next to {n.python}", 'pip install "ray[default]"'))
            elif len(versions) > 1 and n.ray_version != rv:
                rows.append(
                    CheckRow(
                        "ray",
                        n.name,
                        "fail",
                        f"ray {n.ray_version} here, {rv} on the other nodes (Ray refuses mixed versions)",
                        f"pip install ray=={rv}",
                    )
                )
            else:
                rows.append(CheckRow("ray", n.name, "pass", f"ray {n.ray_version}"))
    return rows


def _majority(values: list[str]) -> str | None:
    """The most common value (the head's wins ties: it is first)."""
    if not values:
        return None
    return max(dict.fromkeys(values), key=values.count)


__all__ = ["backend_checks"]
