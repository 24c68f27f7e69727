"""Reading GGUF headers, across every shard of a split model, without touching tensor data.

The parsing is the ``gguf`` package's :class:`gguf.GGUFReader`, with two changes that keep a
header read fast on a 200 GB model: large arrays (a 200k-token vocabulary, BPE merges) are
skipped over instead of being turned into 200k numpy views, and tensors are kept as their
table entries (name, shape, type, size, offset) rather than as views of the data.

    read_gguf(path) -> GGUFFile      # any shard of a split model; finds and reads all of them
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFReader, GGUFValueType
from gguf.gguf_reader import ReaderField

from .._errors import ModelError

#: arrays longer than this are skipped (only their length is kept)
BIG_ARRAY = 4096
_SHARD_RE = re.compile(r"^(?P<stem>.*)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")


@dataclass(frozen=True)
class TensorEntry:
    """One row of a GGUF tensor table."""

    name: str
    shape: tuple[int, ...]  #: GGML order: ne0 (the contiguous dimension) first
    type_name: str  #: e.g. ``Q4_K``, ``F16``; ``TYPE<n>`` for a type this ``gguf`` does not know
    nbytes: int
    shard: int  #: index into :attr:`GGUFFile.shards`
    offset: int  #: absolute byte offset of the data in its shard

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass
class GGUFFile:
    """The headers of one model: metadata of the first shard, tensors of all shards."""

    shards: list[Path]
    metadata: dict[str, Any]
    tensors: list[TensorEntry]
    array_lengths: dict[str, int] = field(default_factory=dict)  #: length of every array key
    file_bytes: int = 0

    def get(self, key: str, default: Any = None) -> Any:
        return self.metadata.get(key, default)


class _HeaderReader(GGUFReader):
    """GGUFReader that skips large arrays and never builds tensor data views."""

    def __init__(self, path: Path) -> None:
        self.skipped: dict[str, int] = {}
        self.entries: list[tuple[str, tuple[int, ...], int, int]] = []
        super().__init__(path, "r")

    def _get_field_parts(self, orig_offs: int, raw_type: int) -> tuple[int, list[Any], list[int], list[Any]]:
        if GGUFValueType(raw_type) != GGUFValueType.ARRAY:
            return super()._get_field_parts(orig_offs, raw_type)
        offs = orig_offs
        raw_itype = self._get(offs, np.uint32)
        alen = self._get(offs + 4, np.uint64)
        offs += 12
        itype = GGUFValueType(int(raw_itype[0]))
        n = int(alen[0])
        nptype = self.gguf_scalar_to_np.get(itype)
        if nptype is not None:  # numeric array: one view
            arr = self._get(offs, nptype, n)
            if len(arr) != n:
                raise ValueError("array runs past the end of the file")
            return 12 + int(arr.nbytes), [raw_itype, alen, arr], [2], [GGUFValueType.ARRAY, itype]
        if itype == GGUFValueType.STRING and n > BIG_ARRAY:
            end = _skip_strings(self.data, offs, n)
            skipped = np.array([n], dtype=np.uint64)
            return end - orig_offs, [raw_itype, alen], [], [GGUFValueType.ARRAY, itype, skipped]
        return super()._get_field_parts(orig_offs, raw_type)

    def _build_tensor_info(self, offs: int, count: int) -> tuple[int, list[Any]]:
        # the tensor table with struct over the mapped bytes: no numpy view per field
        buf = memoryview(self.data)  # type: ignore[arg-type]  # numpy stubs give ndarray __buffer__ on 3.12+ only
        size = len(buf)
        u32, u64 = struct.Struct("<I").unpack_from, struct.Struct("<Q").unpack_from
        rows: list[Any] = []
        for _ in range(int(count)):
            if offs + 8 > size:
                raise ValueError("tensor table runs past the end of the file")
            (n,) = u64(buf, offs)
            name = bytes(buf[offs + 8 : offs + 8 + n]).decode("utf-8")
            offs += 8 + n
            (n_dims,) = u32(buf, offs)
            if n_dims > 8:
                raise ValueError(f"tensor {name!r} has {n_dims} dimensions")
            dims = struct.unpack_from(f"<{n_dims}Q", buf, offs + 4)
            offs += 4 + 8 * n_dims
            (raw,) = u32(buf, offs)
            (off,) = u64(buf, offs + 4)
            offs += 12
            rows.append((name, tuple(int(d) for d in dims), int(raw), int(off)))
        return offs, rows

    def _build_tensors(self, start_offs: int, fields: list[Any]) -> None:
        seen: set[str] = set()
        for name, dims, raw, off in fields:
            if name in seen:
                raise ValueError(f"duplicated tensor {name!r}")
            seen.add(name)
            self.entries.append((name, dims, raw, start_offs + off))


def _skip_strings(data: np.memmap, offs: int, n: int) -> int:
    """Offset just past ``n`` GGUF strings starting at ``offs`` (struct.error when they run off the end)."""
    buf = memoryview(data)  # type: ignore[arg-type]  # numpy stubs give ndarray __buffer__ on 3.12+ only
    unpack = struct.Struct("<Q").unpack_from
    for _ in range(n):
        offs += 8 + unpack(buf, offs)[0]
    if offs > len(buf):
        raise ValueError("string array runs past the end of the file")
    return offs


def _value(f: ReaderField) -> Any:
    if not f.types:
        return None
    if f.types[0] == GGUFValueType.ARRAY:
        if not f.data:
            return None  # skipped big array
        if f.types[1] == GGUFValueType.STRING:
            return [str(bytes(f.parts[i]), encoding="utf-8", errors="replace") for i in f.data]
        return f.parts[f.data[0]].tolist()
    if f.types[0] == GGUFValueType.STRING:
        return str(bytes(f.parts[f.data[0]]), encoding="utf-8", errors="replace")
    return f.parts[f.data[0]].tolist()[0]


def _type_name(raw: int) -> str:
    try:
        return GGMLQuantizationType(raw).name
    except ValueError:
        return f"TYPE{raw}"


def tensor_nbytes(shape: tuple[int, ...], raw_type: int) -> int:
    """Bytes of a tensor of ``shape`` (GGML order) and GGML type number ``raw_type``."""
    try:
        block, size = GGML_QUANT_SIZES[GGMLQuantizationType(raw_type)]
    except (ValueError, KeyError):
        raise ModelError(f"tensor type {raw_type} is unknown to this gguf package; upgrade gguf") from None
    n = 1
    for d in shape[1:]:
        n *= d
    return (shape[0] // block) * size * n if shape else 0


def model_in_dir(folder: Path) -> Path:
    """The GGUF to open in ``folder`` (searched below it too, as ``splitserve fetch`` lays out a quant):
    its only model, or the first shard of its only split model; a ModelError naming the choices otherwise.
    ``mmproj`` files (vision projectors) are not models here.
    """
    found = sorted(p for p in folder.rglob("*.gguf") if p.is_file() and not p.name.lower().startswith("mmproj"))
    firsts: dict[Path, Path] = {}
    for p in found:
        m = _SHARD_RE.match(p.name)
        key = p.with_name(m.group("stem")) if m else p
        firsts.setdefault(key, p)
    if not firsts:
        raise ModelError(f"{folder}: no .gguf file in this folder; give the model file")
    if len(firsts) > 1:
        names = ", ".join(str(p.relative_to(folder)) for p in list(firsts.values())[:6])
        raise ModelError(
            f"{folder}: {len(firsts)} models in this folder ({names}"
            + (", ..." if len(firsts) > 6 else "")
            + "); give one file"
        )
    return next(iter(firsts.values()))


def shard_paths(path: Path) -> list[Path]:
    """All shards of the split model ``path`` belongs to (``path`` alone when it is not split)."""
    m = _SHARD_RE.match(path.name)
    if not m:
        return [path]
    count = int(m.group("count"))
    stem = m.group("stem")
    paths = [path.with_name(f"{stem}-{i:05d}-of-{count:05d}.gguf") for i in range(1, count + 1)]
    missing = [p.name for p in paths if not p.is_file()]
    if missing:
        raise ModelError(
            f"{path}: shard(s) {', '.join(missing)} of {count} missing in {path.parent}; "
            "download every part of the model"
        )
    return paths


def _read_one(path: Path) -> _HeaderReader:
    if not path.is_file():
        raise ModelError(f"{path}: no such file")
    with path.open("rb") as fh:
        magic = fh.read(4)
    if not magic:
        raise ModelError(f"{path}: empty file, not a GGUF model; download it again")
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a GGUF file (it starts with {magic!r}, not b'GGUF')")
    try:
        return _HeaderReader(path)
    except (ValueError, IndexError, KeyError, OverflowError, struct.error) as exc:
        raise ModelError(f"{path}: corrupt or truncated GGUF header ({exc})") from None
    except OSError as exc:
        raise ModelError(f"{path}: cannot read ({exc.strerror or exc})") from None


def read_gguf(path: str | Path) -> GGUFFile:
    """Read the headers of the model at ``path`` (any shard of a split model)."""
    path = Path(path)
    if path.is_dir():
        path = model_in_dir(path)
    paths = shard_paths(path)
    readers = [_read_one(p) for p in paths]
    first = readers[0]
    metadata: dict[str, Any] = {}
    lengths: dict[str, int] = {}
    for name, f in first.fields.items():
        if name.startswith("GGUF."):
            continue
        metadata[name] = _value(f)
        if f.types and f.types[0] == GGUFValueType.ARRAY:
            lengths[name] = int(f.parts[4][0])
    if len(paths) == 1 and int(metadata.get("split.count", 1) or 1) > 1:
        raise ModelError(
            f"{path}: this is shard 1 of {metadata['split.count']} but its name does not say "
            "so (NAME-00001-of-0000N.gguf); rename it so the other shards can be found"
        )
    tensors: list[TensorEntry] = []
    total = 0
    for i, (p, r) in enumerate(zip(paths, readers)):
        size = p.stat().st_size
        total += size
        for name, dims, raw, off in r.entries:
            nb = tensor_nbytes(dims, raw)
            if off + nb > size:
                raise ModelError(
                    f"{p}: truncated: tensor {name} ends at byte {off + nb:,} but the file has "
                    f"{size:,}; download it again"
                )
            tensors.append(TensorEntry(name, dims, _type_name(raw), nb, i, off))
    expected = metadata.get("split.tensors.count")
    if expected is not None and int(expected) != len(tensors):
        raise ModelError(
            f"{path}: the shards hold {len(tensors)} tensors but split.tensors.count says "
            f"{expected}; a shard is from another model or incomplete"
        )
    return GGUFFile(shards=paths, metadata=metadata, tensors=tensors, array_lengths=lengths, file_bytes=total)
