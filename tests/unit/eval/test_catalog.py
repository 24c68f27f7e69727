"""The tool catalogue (``_catalog``): schemas derived from typed functions, and the same
schemas every scenario sent the model before the catalogue (the fixture)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Literal

import pytest

from splitserve.eval import load_suite
from splitserve.eval._catalog import ToolError, Toolset
from splitserve.eval._play import _tool_infos, tool_schemas
from splitserve.eval._sandbox import SANDBOX
from splitserve.eval._tools import TOOLERY
from splitserve.eval.builtin._tools import BUILTIN

ROOT = Path(__file__).resolve().parents[3]
# captured at 3975363 (before the catalogue) from `_play.tool_schemas` and `_play._tool_infos`;
# "schemas" holds each distinct schema once, the rest index into it
FIXTURE = json.loads((ROOT / "tests/fixtures/eval/tool_schemas.json").read_text("utf-8"))
SUITES = ("builtin", "tests/fixtures/eval/toolery", "tests/fixtures/eval/toolery-real/scenarios")


def _text(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False)


@pytest.fixture(scope="module")
def sent() -> dict[str, tuple[list[dict[str, Any]], list[dict[str, Any]]]]:
    """Per scenario: its tool schemas, and the tools as inspect sends them to the model."""
    out = {}
    for suite in SUITES:
        for sc in load_suite(str(ROOT / suite) if suite != "builtin" else suite).scenarios:
            wire = [t.model_dump(exclude_none=True) for t in _tool_infos(sc)]
            out[f"{suite}:{sc.id}"] = (tool_schemas(sc), wire)
    return out


def test_every_scenario_sends_the_model_the_same_tools_byte_for_byte(sent: Any) -> None:
    assert set(sent) == set(FIXTURE["wire"])
    for key, (_, wire) in sent.items():
        want = [FIXTURE["schemas"][i] for i in FIXTURE["wire"][key]]
        assert _text(wire) == _text(want), key


def test_every_scenario_keeps_its_tool_schemas(sent: Any) -> None:
    # the same values; key order within a parameter is inspect's now (type, description, default,
    # enum, items), which is also the order the model has always been sent (the test above)
    for key, (schemas, _) in sent.items():
        assert schemas == [FIXTURE["schemas"][i] for i in FIXTURE["scenarios"][key]], key


@pytest.mark.parametrize(("name", "toolset"), [("toolery", TOOLERY), ("mock", BUILTIN), ("sandbox", SANDBOX)])
def test_each_toolset_derives_the_schemas_it_had(name: str, toolset: Toolset) -> None:
    want = {tool: FIXTURE["schemas"][i] for tool, i in FIXTURE["toolsets"][name].items()}
    assert set(toolset) == set(want)
    assert toolset.schemas() == want


# --- the catalogue itself, on a toolset of its own ---

DEMO = Toolset("demo")


@DEMO.tool
def book_room(
    *,
    building: str,
    floor: int,
    when: Literal["am", "pm"] = "am",
    guests: list[str] | None = None,
    from_: str = "lobby",
) -> str:
    """Book a meeting room for half a day; the description may wrap
    over several lines of the docstring.

    Args:
        building: Building name.
        floor: Floor number, 0 for the ground
            floor.
        when: Morning or afternoon.
        guests: Who comes.
        from_: Where the guests are met.
    """
    return f"{building}/{floor} {when} {guests or []} from {from_}"


class Desk:
    def __init__(self) -> None:
        self.booked: list[int] = []

    @DEMO.tool
    async def book_desk(self, *, number: int) -> str:
        """Book a desk by its number."""
        self.booked.append(number)
        return f"desk {number}"


def test_a_typed_function_gives_its_openai_schema() -> None:
    assert DEMO.schema("book_room") == {
        "type": "function",
        "function": {
            "name": "book_room",
            "description": "Book a meeting room for half a day; the description may wrap over several lines of the docstring.",
            "parameters": {
                "type": "object",
                "properties": {
                    "building": {"type": "string", "description": "Building name."},
                    "floor": {"type": "integer", "description": "Floor number, 0 for the ground floor."},
                    "when": {"type": "string", "description": "Morning or afternoon.", "default": "am", "enum": ["am", "pm"]},
                    "guests": {"type": "array", "description": "Who comes.", "items": {"type": "string"}},
                    "from": {"type": "string", "description": "Where the guests are met.", "default": "lobby"},
                },
                "required": ["building", "floor"],
            },
        },
    }  # fmt: skip
    # a method's schema leaves out `self`
    assert DEMO.schema("book_desk")["function"]["parameters"] == {
        "type": "object",
        "properties": {"number": {"type": "integer"}},
        "required": ["number"],
    }
    assert list(DEMO) == ["book_room", "book_desk"] and "book_desk" in DEMO and "nope" not in DEMO
    with pytest.raises(ValueError, match="defined twice"):
        DEMO.tool(book_room)


def test_a_call_runs_with_its_arguments_validated() -> None:
    got = asyncio.run(DEMO.call("book_room", {"building": "B2", "floor": "3", "from": "gate", "extra": 1}))
    assert got == "B2/3 am [] from gate"  # "3" read as 3, `from` passed as from_, an unknown argument ignored
    desk = Desk()
    assert asyncio.run(DEMO.call("book_desk", {"number": 7}, desk)) == "desk 7"
    assert desk.booked == [7]


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ({"floor": 1}, "missing argument 'building'"),
        ({"building": None, "floor": 1}, "missing argument 'building'"),
        ({"building": 5, "floor": 1}, "argument 'building' must be a string, got int"),
        ({"building": "B", "floor": "third"}, "argument 'floor' must be an integer, got str"),
        ({"building": "B", "floor": 1, "when": "noon"}, "argument 'when' must be one of the allowed values, got str"),
        ({"building": "B", "floor": 1, "guests": ["ann", 2]}, "argument 'guests[1]' must be a string, got int"),
    ],
)
def test_a_bad_argument_is_a_tool_error_naming_it(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ToolError) as caught:
        asyncio.run(DEMO.call("book_room", args))
    assert str(caught.value) == error


def test_an_unknown_tool_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="no tool 'book_car' in demo"):
        asyncio.run(DEMO.call("book_car", {}))
