"""The exception tree of ``splitserve._errors``'s docstring is the tree of the code.

Every exception class of src/splitserve with a public name derives from ``SplitserveError``, and
the docstring's drawing names each one once, under the class it derives from. The classes are read
with ``ast`` (nothing imported), so a class in a module with optional dependencies counts too.
"""

from __future__ import annotations

import ast
import builtins
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

import splitserve
from splitserve import _errors

SRC = Path(splitserve.__file__).resolve().parent
ROOT = "SplitserveError"
BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


@dataclass(frozen=True)
class Cls:
    module: str
    name: str
    bases: tuple[str, ...]  # as written: ``EngineError``, ``httpx.HTTPError``


CLASS_LINE = re.compile(r"^class \w+\(.*\):", re.MULTILINE)


def classes(src: Path = SRC) -> list[Cls]:
    """Every module-level class with bases (its ``class`` line read with ``ast``; folders without
    ``__init__.py`` hold data, not modules)."""
    found = []
    for path in sorted(src.rglob("*.py")):
        rel = path.relative_to(src)
        if not all((src / Path(*rel.parts[:i]) / "__init__.py").is_file() for i in range(len(rel.parts))):
            continue
        module = ".".join(rel.with_suffix("").parts)
        for line in CLASS_LINE.findall(path.read_text(encoding="utf-8")):
            node = ast.parse(line + " ...").body[0]
            assert isinstance(node, ast.ClassDef)
            found.append(Cls(module, node.name, tuple(ast.unparse(b) for b in node.bases)))
    return found


def exception_parents(found: list[Cls]) -> dict[str, list[str]]:
    """Each exception class's name -> its bases that are exceptions (splitserve's own by bare name,
    Python's built-in ones, and other libraries' ``...Error`` / ``...Exception``)."""
    by_name: dict[str, list[Cls]] = {}
    for c in found:
        by_name.setdefault(c.name, []).append(c)

    def is_exception(base: str, seen: frozenset[str] = frozenset()) -> bool:
        if base in BUILTIN_EXCEPTIONS or (("." in base) and re.search(r"(Error|Exception)$", base)):
            return True
        if base in seen or base not in by_name:
            return False
        return any(is_exception(b, seen | {base}) for c in by_name[base] for b in c.bases)

    out: dict[str, list[str]] = {}
    for c in found:
        parents = [b for b in c.bases if is_exception(b)]
        if parents:
            assert c.name not in out, f"two exception classes named {c.name}: the tree could not tell them apart"
            out[c.name] = parents
    return out


def under_root(name: str, parents: dict[str, list[str]]) -> bool:
    return name == ROOT or any(under_root(p, parents) for p in parents.get(name, []) if p in parents)


def drawn_tree(doc: str) -> dict[str, str | None]:
    """The docstring's drawing as class name -> the class drawn above it (None for the root)."""
    lines = doc.splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == ROOT)
    indent = lines[start].index(ROOT)
    tree: dict[str, str | None] = {ROOT: None}
    stack = [ROOT]
    for line in lines[start + 1 :]:
        m = re.match(r"((?:[│ ]   )*)[├└]── ([A-Z]\w*)(\s{2,}.*)?$", line[indent:])
        if m is None:
            break  # the drawing ends at its first line that is not a branch
        depth = len(m.group(1)) // 4 + 1
        name = m.group(2)
        del stack[depth:]
        assert name not in tree, f"{name} is drawn twice"
        tree[name] = stack[-1]
        stack.append(name)
    return tree


@pytest.fixture(scope="module")
def parents() -> dict[str, list[str]]:
    return exception_parents(classes())


def test_the_classes_are_read(parents: dict[str, list[str]]) -> None:
    # a reader that missed the tree would pass every check below
    assert parents["EngineUnavailable"] == ["EngineError"] and parents[ROOT] == ["Exception"]
    assert {"APIError", "FetchFailed", "TransplantError", "_Retry"} <= set(parents)


def test_every_public_exception_class_is_under_the_root(parents: dict[str, list[str]]) -> None:
    outside = sorted(n for n in parents if not n.startswith("_") and not under_root(n, parents))
    assert outside == [], f"exception classes outside {ROOT} (derive them from it, or make them private signals)"


def test_the_docstring_draws_the_tree_of_the_code(parents: dict[str, list[str]]) -> None:
    drawn = drawn_tree(_errors.__doc__ or "")
    code = {n: next((p for p in ps if p in parents), None) for n, ps in parents.items() if not n.startswith("_")}
    assert drawn == code


def test_the_drawing_is_read_with_its_nesting() -> None:
    doc = """
    SplitserveError
    ├── A                one
    │   ├── B            (x._y) two
    │   └── C
    │       └── D
    └── E                three
    """
    assert drawn_tree(doc) == {"SplitserveError": None, "A": "SplitserveError", "B": "A", "C": "A", "D": "C", "E": ROOT}


def test_a_public_exception_outside_the_root_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "_errors.py").write_text("class SplitserveError(Exception): ...\nclass SpecError(SplitserveError): ...\n")
    (pkg / "_a.py").write_text(
        "import httpx\nclass Lost(ValueError): ...\nclass Wrapped(httpx.HTTPError): ...\n"
        "class _Signal(Exception): ...\nclass Fine(SpecError): ...\nclass NotAnError: ...\n"
    )
    found = exception_parents(classes(pkg))
    assert "NotAnError" not in found
    assert sorted(n for n in found if not n.startswith("_") and not under_root(n, found)) == ["Lost", "Wrapped"]
