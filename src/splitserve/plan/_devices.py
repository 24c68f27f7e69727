"""Known devices: memory bandwidth (GB/s) for the decode upper bound, and node parsing.

Bandwidths are the vendors' published peak figures; override per node with ``bw=``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .._errors import UsageError

GIB = 1024**3

#: device kind -> peak memory bandwidth in GB/s (1e9 bytes/s)
BANDWIDTH_GBPS: dict[str, float] = {
    "gb10": 273.0,  # DGX Spark, LPDDR5x unified memory
    "dgx-spark": 273.0,
    "h100": 3350.0,  # SXM5 80 GB
    "h100-pcie": 2000.0,
    "h200": 4800.0,
    "a100": 2039.0,  # 80 GB SXM
    "a100-40g": 1555.0,
    "l40s": 864.0,
    "rtx-5090": 1792.0,
    "rtx-4090": 1008.0,
    "rtx-3090": 936.0,
    "rtx-6000-ada": 960.0,
    "rtx-pro-6000": 1792.0,
    "m2-ultra": 800.0,
    "m3-ultra": 819.0,
    "m4-max": 546.0,
    "strix-halo": 256.0,
    "cpu-ddr5-2ch": 90.0,
    "cpu-ddr4-2ch": 50.0,
}


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())


#: spellings people use (``RTX 5090``, ``rtx5090``, ``H100-SXM``, ``spark``) -> a table key
DEVICE_ALIASES: dict[str, str] = {_squash(k): k for k in BANDWIDTH_GBPS} | {
    "spark": "gb10",
    "dgxspark": "gb10",
    "h100sxm": "h100",
    "h100sxm5": "h100",
    "h200sxm": "h200",
    "h200nvl": "h200",
    "a10080g": "a100",
    "a100sxm": "a100",
    "5090": "rtx-5090",
    "4090": "rtx-4090",
    "3090": "rtx-3090",
    "rtx6000ada": "rtx-6000-ada",
    "rtxpro6000": "rtx-pro-6000",
    "rtxpro6000blackwell": "rtx-pro-6000",
}


def device_key(name: str) -> str | None:
    """The :data:`BANDWIDTH_GBPS` key a device name means (case, spaces, ``-``/``_`` ignored), or None."""
    return DEVICE_ALIASES.get(_squash(name))


_UNITS = {
    "": 1.0,
    "g": 1.0,
    "gib": 1.0,
    "gb": 1e9 / GIB,
    "t": 1024.0,
    "tib": 1024.0,
    "tb": 1e12 / GIB,
    "m": 1 / 1024,
    "mib": 1 / 1024,
    "mb": 1e6 / GIB,
}


def parse_gib(text: str) -> float:
    """``121``, ``121G``, ``121GiB``, ``130GB`` (decimal), ``512MiB`` -> GiB; ValueError otherwise."""
    t = text.strip().lower()
    i = len(t)
    while i and t[i - 1].isalpha():
        i -= 1
    number, unit = t[:i].strip(), t[i:]
    if unit not in _UNITS:
        raise ValueError(text)
    return float(number) * _UNITS[unit]


@dataclass(frozen=True)
class Node:
    """One device, in the order llama.cpp sees it (``--rpc`` order, then local devices)."""

    name: str
    memory_bytes: int  #: memory the model may use on it (free memory)
    device: str | None = None  #: a key of :data:`BANDWIDTH_GBPS`
    bandwidth_gbps: float | None = None  #: overrides the device table

    @property
    def bandwidth(self) -> float | None:
        if self.bandwidth_gbps is not None:
            return self.bandwidth_gbps
        if self.device is not None:
            key = device_key(self.device)
            return BANDWIDTH_GBPS.get(key) if key else None
        return None


def parse_node(text: str) -> Node:
    """``NAME=GIB[,device=KIND][,bw=GBPS]``, e.g. ``spark1=121,device=gb10``."""
    name, sep, rest = text.partition("=")
    if not sep or not name.strip():
        raise UsageError(f"--node {text!r}: expected NAME=GIB[,device=KIND][,bw=GBPS], e.g. spark1=121,device=gb10")
    parts = [p.strip() for p in rest.split(",") if p.strip()]
    if not parts:
        raise UsageError(f"--node {text!r}: no memory size; expected NAME=GIB, e.g. spark1=121")
    try:
        gib = parse_gib(parts[0])
    except ValueError:
        raise UsageError(
            f"--node {text!r}: memory {parts[0]!r} is not a number of GiB (121, 121GiB, 512MiB, 130GB)"
        ) from None
    if gib <= 0:
        raise UsageError(f"--node {text!r}: memory must be positive GiB")
    device: str | None = None
    bw: float | None = None
    for p in parts[1:]:
        key, _, value = p.partition("=")
        key = key.strip().lower()
        if key in ("device", "dev", "kind"):
            device = device_key(value)
            if device is None:
                raise UsageError(
                    f"--node {text!r}: unknown device {value!r}; known: "
                    f"{', '.join(sorted(BANDWIDTH_GBPS))} (or give bw=GBPS)"
                )
        elif key in ("bw", "bandwidth"):
            try:
                bw = float(value.strip().lower().removesuffix("gb/s").removesuffix("gbps"))
            except ValueError:
                raise UsageError(f"--node {text!r}: bw {value!r} is not a number of GB/s") from None
            if bw <= 0:
                raise UsageError(f"--node {text!r}: bw must be a positive number of GB/s")
        else:
            raise UsageError(f"--node {text!r}: unknown field {key!r}; use device= or bw=")
    return Node(name=name.strip(), memory_bytes=int(gib * GIB), device=device, bandwidth_gbps=bw)
