"""tests/unit runs on fakes and factory GGUFs alone: a unit test that asks for the real engine
build or a model wheel (the ``engine``, ``smollm2`` or ``gemma3`` fixtures) is refused at
collection; it belongs in tests/integration."""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).parent
REAL = ("engine", "smollm2", "gemma3")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    wrong = [
        f"{item.nodeid} (uses {', '.join(f for f in REAL if f in getattr(item, 'fixturenames', ()))})"
        for item in items
        if item.path.is_relative_to(HERE) and set(REAL) & set(getattr(item, "fixturenames", ()))
    ]
    if wrong:
        raise pytest.UsageError(
            "tests/unit needs neither the engine build nor a model wheel; move to tests/integration: "
            + "; ".join(wrong)
        )
