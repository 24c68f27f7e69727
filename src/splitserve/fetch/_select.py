"""Which files of a repository to fetch: globs, quant names and GGUF shard sets.

Pure functions of a listing.  A *shard set* is the files llama.cpp loads as one model:
either one ``NAME.gguf`` or ``PREFIX-00001-of-0000N.gguf`` … ``PREFIX-0000N-of-0000N.gguf`` in
one folder (llama.cpp's ``llama_split_path`` naming).  A quant name such as ``UD-IQ4_XS``
selects the shard set whose folder is that name or whose file name ends with it; when a name
is a suffix of several labels (``IQ4_XS`` of ``IQ4_XS`` and ``UD-IQ4_XS``) the exact label wins.
"""

from __future__ import annotations

import fnmatch
import os
import re
from dataclasses import dataclass, field

from .._errors import UsageError
from ._errors import FetchError

_SPLIT = re.compile(r"^(?P<prefix>.+)-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf$")
_SEP = "-_."


@dataclass(frozen=True)
class RemoteFile:
    """One file of a repository at a fixed commit, as the hub lists it."""

    path: str
    size: int
    sha256: str | None = None  # the LFS oid; None for a small file stored in git
    blob_id: str | None = None  # the git blob sha1 (the ETag of a non-LFS file)

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None


@dataclass
class ShardSet:
    """The GGUF files llama.cpp loads as one model."""

    folder: str
    prefix: str  # file name without the split suffix and without ``.gguf``
    count: int  # shards the names announce (1 for an unsplit file)
    files: list[RemoteFile] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"{self.folder}/{self.prefix}" if self.folder else self.prefix

    @property
    def first(self) -> str:
        """The path to hand to ``llama-server -m`` (llama.cpp finds the other shards)."""
        return min(f.path for f in self.files)

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def complete(self) -> bool:
        return len(self.files) == self.count

    @property
    def is_mmproj(self) -> bool:
        return os.path.basename(self.prefix).lower().startswith("mmproj")


def split_name(path: str) -> tuple[str, int, int] | None:
    """``("dir/PREFIX", index, count)`` of a llama.cpp split name, or None."""
    folder, base = os.path.split(path)
    m = _SPLIT.match(base)
    if not m:
        return None
    return os.path.join(folder, m["prefix"]), int(m["index"]), int(m["count"])


def shard_sets(files: list[RemoteFile]) -> list[ShardSet]:
    """Group the GGUF files of a listing into shard sets, in name order."""
    sets: dict[tuple[str, str, int], ShardSet] = {}
    for f in sorted(files, key=lambda f: f.path):
        if not f.path.endswith(".gguf"):
            continue
        folder, base = os.path.split(f.path)
        m = _SPLIT.match(base)
        prefix, count = (m["prefix"], int(m["count"])) if m else (base[: -len(".gguf")], 1)
        key = (folder, prefix, count)
        sets.setdefault(key, ShardSet(folder, prefix, count)).files.append(f)
    return list(sets.values())


def quant_labels(sets: list[ShardSet]) -> dict[str, str]:
    """A short label per shard set: what its name adds to the name all sets share."""
    models = [s for s in sets if not s.is_mmproj]
    prefixes = [s.prefix for s in models]
    common = os.path.commonprefix(prefixes) if len(prefixes) > 1 else ""
    cut = max((common.rfind(c) for c in _SEP), default=-1) + 1 if common else 0
    labels = {}
    for s in sets:
        if s.is_mmproj:
            labels[s.name] = s.prefix
        elif cut and s.prefix[cut:]:
            labels[s.name] = s.prefix[cut:]
        elif s.folder:
            labels[s.name] = os.path.basename(s.folder)
        else:
            labels[s.name] = s.prefix
    return labels


def _matches_quant(s: ShardSet, quant: str) -> bool:
    q = quant.lower()
    if s.folder and os.path.basename(s.folder).lower() == q:
        return True
    p = s.prefix.lower()
    return p == q or any(p.endswith(c + q) for c in _SEP)


def select_quant(sets: list[ShardSet], quant: str) -> ShardSet:
    """The one shard set a quant name means; a UsageError naming the choices otherwise."""
    labels = quant_labels(sets)
    candidates = [s for s in sets if not s.is_mmproj and _matches_quant(s, quant)]
    if len(candidates) > 1:
        exact = [
            s
            for s in candidates
            if labels[s.name].lower() == quant.lower() or os.path.basename(s.folder).lower() == quant.lower()
        ]
        if exact:
            candidates = exact
    if len(candidates) > 1:
        # one set per folder: a folder named after the quant and a flat copy are the same quant
        names = ", ".join(s.name for s in candidates)
        raise UsageError(
            f"--quant {quant} matches {len(candidates)} shard sets ({names}); "
            f"name one exactly, e.g. --quant {labels[candidates[0].name]}"
        )
    if not candidates:
        known = ", ".join(sorted({labels[s.name] for s in sets if not s.is_mmproj})) or "none"
        raise UsageError(f"--quant {quant}: no GGUF file set of that name; this repository has: {known}")
    return candidates[0]


def select_files(
    files: list[RemoteFile], includes: list[str] | None = None, quants: list[str] | None = None
) -> list[RemoteFile]:
    """The files to fetch: the union of the quants' shard sets and the glob matches.

    With neither, every file.  A selected shard set must be complete in the listing.
    """
    includes, quants = list(includes or []), list(quants or [])
    if not includes and not quants:
        chosen = list(files)
    else:
        sets = shard_sets(files)
        picked: dict[str, RemoteFile] = {}
        for quant in quants:
            s = select_quant(sets, quant)
            if not s.complete:
                raise FetchError(
                    f"{s.name}: the repository lists {len(s.files)} of the "
                    f"{s.count} shards its names announce; cannot fetch a partial "
                    "model (check the repository or --revision)"
                )
            picked.update({f.path: f for f in s.files})
        for pattern in includes:
            hits = [
                f
                for f in files
                if fnmatch.fnmatchcase(f.path, pattern) or fnmatch.fnmatchcase(os.path.basename(f.path), pattern)
            ]
            if not hits:
                raise UsageError(f"{pattern!r} (a FILE or --include glob) matches no file of the repository")
            picked.update({f.path: f for f in hits})
        chosen = [f for f in files if f.path in picked]
    return sorted(chosen, key=lambda f: f.path)


def incomplete_sets(files: list[RemoteFile]) -> list[ShardSet]:
    """Shard sets of which only some shards are among ``files`` (llama.cpp needs all)."""
    return [s for s in shard_sets(files) if not s.complete]
