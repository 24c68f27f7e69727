"""Each package's ``__init__`` exports its API through ``__all__`` and nothing beside it (as httpx's
``tests/test_exported_members.py`` checks): every listed name resolves, and every class or function
of splitserve that the package's namespace holds is listed. Tests may import a package's internals
from its private modules (``splitserve.bench._stats``); users import from the package."""

from __future__ import annotations

import importlib
import inspect

import pytest

PACKAGES = ["bench", "chat", "cluster", "engine", "eval", "fetch", "gateway", "model", "plan", "connect"]


@pytest.mark.parametrize("name", PACKAGES)
def test_all_lists_exactly_what_the_package_exports(name: str) -> None:
    pkg = importlib.import_module(f"splitserve.{name}")
    listed = list(pkg.__all__)
    assert len(set(listed)) == len(listed), "a name is listed twice"
    assert sorted(listed, key=lambda n: (not n.isupper(), n)) == listed, "sorted as ruff's RUF022 sorts it"
    for export in listed:
        assert not export.startswith("_"), export
        assert getattr(pkg, export) is not None, export  # resolves (lazy names are imported here)
    stray = sorted(
        n
        for n, obj in vars(pkg).items()
        if not n.startswith("_")
        and (inspect.isclass(obj) or inspect.isfunction(obj))
        and getattr(obj, "__module__", "").startswith("splitserve.")
        and n not in listed
    )
    assert stray == [], f"splitserve.{name} holds names its __all__ does not list"
