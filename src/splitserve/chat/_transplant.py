"""Template transplants: replace named blocks of a base template with blocks of a donor.

A recipe (TOML; see ``recipes/minimax-m3-hybrid.toml``) lists blocks. Each block is located
in the base by ``base_start`` / ``base_end`` anchors (exact text: from the start anchor to
the end of the first end anchor after it) and replaced by the donor's block located the same
way (``donor_start`` / ``donor_end``), or by literal ``text``. A start anchor must occur
exactly once in its file and blocks must not overlap; otherwise :class:`TransplantError`
names the block and the file, so a changed upstream template fails loudly instead of
producing a quietly broken hybrid.
"""

from __future__ import annotations

import itertools
import tomllib
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from ._errors import TransplantError


@dataclass(frozen=True)
class Block:
    name: str
    base_start: str
    base_end: str
    donor_start: str = ""
    donor_end: str = ""
    text: str | None = None


@dataclass(frozen=True)
class Recipe:
    name: str
    description: str
    blocks: tuple[Block, ...]
    format: str | None = None
    base: str = ""
    donor: str = ""


def list_recipes() -> list[str]:
    """The names of the recipes shipped with splitserve."""
    folder = resources.files("splitserve.chat") / "recipes"
    return sorted(p.name[:-5] for p in folder.iterdir() if p.name.endswith(".toml"))


def _parse(text: str, where: str) -> Recipe:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TransplantError(f"{where}: not valid TOML: {exc}") from None
    blocks = []
    for i, raw in enumerate(data.get("block", [])):
        if not isinstance(raw, dict):
            raise TransplantError(f"{where}: block {i + 1} is not a table")
        name = str(raw.get("name", f"block {i + 1}"))
        missing = [k for k in ("base_start", "base_end") if not isinstance(raw.get(k), str) or not raw.get(k)]
        if "text" not in raw:
            missing += [k for k in ("donor_start", "donor_end") if not isinstance(raw.get(k), str) or not raw.get(k)]
        if missing:
            raise TransplantError(f"{where}: block {name!r} lacks {', '.join(missing)}")
        blocks.append(
            Block(
                name=name,
                base_start=raw["base_start"],
                base_end=raw["base_end"],
                donor_start=raw.get("donor_start", ""),
                donor_end=raw.get("donor_end", ""),
                text=raw.get("text"),
            )
        )
    if not blocks:
        raise TransplantError(f"{where}: the recipe has no [[block]] entries")
    return Recipe(
        name=str(data.get("name", where)),
        description=str(data.get("description", "")),
        blocks=tuple(blocks),
        format=data.get("format"),
        base=str(data.get("base", "")),
        donor=str(data.get("donor", "")),
    )


def load_recipe(name_or_path: str | Path) -> Recipe:
    """A shipped recipe by name (``minimax-m3-hybrid``) or a recipe file by path."""
    path = Path(name_or_path)
    if path.suffix == ".toml" or path.is_file():
        try:
            return _parse(path.read_text(encoding="utf-8"), str(path))
        except OSError as exc:
            raise TransplantError(f"{path}: cannot read the recipe: {exc.strerror}") from None
    name = str(name_or_path)
    if name not in list_recipes():
        raise TransplantError(f"no recipe named {name!r}; shipped: {', '.join(list_recipes())} (or pass a .toml file)")
    text = (resources.files("splitserve.chat") / "recipes" / f"{name}.toml").read_text("utf-8")
    return _parse(text, f"recipe {name}")


def _locate(text: str, start: str, end: str, block: str, where: str) -> tuple[int, int]:
    count = text.count(start)
    if count != 1:
        found = "not found" if count == 0 else f"found {count} times"
        raise TransplantError(
            f"block {block!r}: start anchor {start[:60]!r} {found} in "
            f"{where} (must be exactly once); the template changed, update "
            "the recipe"
        )
    i = text.index(start)
    j = text.find(end, i + len(start))
    if j < 0:
        raise TransplantError(
            f"block {block!r}: end anchor {end[:60]!r} not found after the start anchor in {where}; update the recipe"
        )
    return i, j + len(end)


def transplant(base: str, donor: str, recipe: Recipe, base_name: str = "base", donor_name: str = "donor") -> str:
    """The base template with every recipe block replaced from the donor."""
    spans: list[tuple[int, int, str, str]] = []
    for block in recipe.blocks:
        i, j = _locate(base, block.base_start, block.base_end, block.name, base_name)
        if block.text is not None:
            replacement = block.text
        else:
            a, b = _locate(donor, block.donor_start, block.donor_end, block.name, donor_name)
            replacement = donor[a:b]
        spans.append((i, j, replacement, block.name))
    spans.sort()
    for (_i1, j1, _, n1), (i2, _, _, n2) in itertools.pairwise(spans):
        if i2 < j1:
            raise TransplantError(f"blocks {n1!r} and {n2!r} overlap in {base_name}; fix the recipe's anchors")
    out = base
    for i, j, replacement, _ in reversed(spans):
        out = out[:i] + replacement + out[j:]
    return out
