"""The eval's tool catalogue: every tool a typed Python function, its schema derived from it.

A :class:`Toolset` holds tools by name. A tool is a function (or a method of the class that
runs it) with keyword-only, type-hinted parameters and a Google-style docstring: the first
paragraph is the tool's description, ``Args:`` describes its parameters. inspect_ai derives
the schema, as its ``@tool`` / :class:`~inspect_ai.tool.ToolDef` do (``ToolDef(fn)`` reads the
signature and the docstring); :meth:`Toolset.schema` writes it as an OpenAI function schema,
and :meth:`Toolset.call` runs the tool with its arguments validated against the same
signature (pydantic's ``validate_call``): a bad argument becomes a :class:`ToolError`, which
the caller answers the model with.

Three toolsets use it, one per kind of tool (the same name may mean different tools in two
of them, e.g. ``get_weather``):

- ``TOOLERY`` (``_tools``): the tools of Toolery's registries, which a scenario file may name
  without giving a schema; answered by the scenario's rules (``_mock``);
- ``BUILTIN`` (``builtin/_tools``): the lookup tools of the built-in suite; answered by rules;
- ``SANDBOX`` (``_sandbox``): the workspace's tools (files, git, pytest, shell, SQL, web),
  methods of :class:`~splitserve.eval._sandbox.Workspace` that really run.

inspect's schema is kept as it is but for four points, so the schemas read as they always
have (``tests/fixtures/eval/tool_schemas.json`` holds them): a parameter typed ``X | None``
with default None is an optional ``X`` (inspect writes ``anyOf: [X, null]``); descriptions
are one line (a docstring wraps them); ``additionalProperties: {}`` (any value, JSON
Schema's default) is left out; a trailing underscore names a parameter that is a Python
keyword (``from_`` is ``from``).
"""

from __future__ import annotations

import copy
import inspect
import types
from collections.abc import Awaitable, Callable, Iterable, Iterator
from typing import Any, TypeVar

from .._errors import SplitserveError

F = TypeVar("F", bound=Callable[..., Any])

# a method's schema is derived from it bound to this placeholder (inspect leaves out `self`); never called
_PLACEHOLDER = object()


class ToolError(SplitserveError):
    """A bad tool call by the model (a bad argument, a missing file, …): the tool answers it
    with ``error: <message>``, which the model can recover from."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


def _property(schema: dict[str, Any]) -> dict[str, Any]:
    """One parameter's schema as we show it (see the module docstring)."""
    out = dict(schema)
    options = out.get("anyOf")
    if isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        (kept,) = [o for o in options if o != {"type": "null"}]
        del out["anyOf"]
        out = {**kept, **out}
    if out.get("additionalProperties") == {}:
        del out["additionalProperties"]
    if "description" in out:
        out["description"] = _one_line(out["description"])
    # JSON Schema's key order as inspect dumps it (type first), whatever the merge above did
    order = ["type", "format", "description", "default", "enum", "items", "properties", "additionalProperties"]
    return {k: out[k] for k in sorted(out, key=lambda k: order.index(k) if k in order else len(order))}


def _wire_name(param: str) -> str:
    return param[:-1] if param.endswith("_") and not param.startswith("_") else param


class Toolset:
    """Tools by name, each a typed function; see the module docstring."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._fns: dict[str, Callable[..., Any]] = {}
        self._schemas: dict[str, dict[str, Any]] = {}
        self._validated: dict[str, Callable[..., Any]] = {}

    def tool(self, fn: F) -> F:
        """Register ``fn`` (a function, or a method of the class that runs the tool) under its name."""
        if fn.__name__ in self._fns:
            raise ValueError(f"toolset {self.name}: tool {fn.__name__!r} is defined twice")
        self._fns[fn.__name__] = fn
        return fn

    def __contains__(self, name: object) -> bool:
        return name in self._fns

    def __iter__(self) -> Iterator[str]:
        return iter(self._fns)

    def __len__(self) -> int:
        return len(self._fns)

    def _is_method(self, fn: Callable[..., Any]) -> bool:
        return next(iter(inspect.signature(fn).parameters), None) == "self"

    def info(self, name: str) -> Any:
        """inspect_ai's ToolDef of tool ``name`` (KeyError when there is none)."""
        from inspect_ai.tool import ToolDef

        fn = self._fns[name]
        return ToolDef(types.MethodType(fn, _PLACEHOLDER) if self._is_method(fn) else fn, name=name)

    def schema(self, name: str) -> dict[str, Any]:
        """Tool ``name``'s OpenAI function schema (a fresh copy; KeyError when there is none)."""
        if name not in self._schemas:
            tdef = self.info(name)
            params = tdef.parameters.model_dump(exclude_none=True)
            self._schemas[name] = {
                "type": "function",
                "function": {
                    "name": name,
                    "description": _one_line(tdef.description),
                    "parameters": {
                        "type": "object",
                        "properties": {_wire_name(k): _property(v) for k, v in params["properties"].items()},
                        "required": [_wire_name(k) for k in params["required"]],
                    },
                },
            }
        return copy.deepcopy(self._schemas[name])

    def schemas(self) -> dict[str, dict[str, Any]]:
        """Every tool's schema, by name, in the order the tools were defined."""
        return {name: self.schema(name) for name in self._fns}

    async def call(self, name: str, args: dict[str, Any], owner: Any = None) -> Any:
        """Run tool ``name`` with ``args`` (the model's, by their schema names) validated
        against its signature; arguments it does not take are ignored. ``owner`` is the
        instance whose method the tool is. Raises ToolError for a bad argument."""
        from pydantic import ConfigDict, ValidationError, validate_call

        fn = self._fns.get(name)
        if fn is None:
            raise ToolError(f"no tool {name!r} in {self.name}")
        if name not in self._validated:
            self._validated[name] = validate_call(config=ConfigDict(extra="ignore"))(fn)
        params = {_wire_name(p): p for p in inspect.signature(fn).parameters if p != "self"}
        kwargs = {params.get(k, k): v for k, v in args.items()}
        try:  # an async tool validates its arguments when awaited
            call = self._validated[name](owner, **kwargs) if self._is_method(fn) else self._validated[name](**kwargs)
            return await call if inspect.isawaitable(call) else call
        except ValidationError as exc:
            raise ToolError(_argument_error(exc)) from None


_JSON_TYPES = {
    "string": "a string",
    "int": "an integer",
    "float": "a number",
    "bool": "a boolean",
    "list": "a list",
    "dict": "an object",
    "literal": "one of the allowed values",
}


def _argument_error(exc: Any) -> str:
    """A pydantic ValidationError as one line the model can act on (its first error)."""
    err = exc.errors(include_url=False)[0]
    loc = [str(p) for p in err["loc"]]
    name = _wire_name(loc[0]) if loc else "?"
    where = name + "".join(f"[{p}]" for p in loc[1:])
    if err["type"] in ("missing_argument", "missing_keyword_only_argument") or (
        err.get("input", 0) is None and len(loc) == 1
    ):
        return f"missing argument {name!r}"
    kind = next((v for k, v in _JSON_TYPES.items() if err["type"].startswith(k)), None)
    if kind is not None:
        return f"argument {where!r} must be {kind}, got {type(err.get('input')).__name__}"
    return f"argument {where!r}: {err['msg']}"


# --- what inspect_ai sends and runs ---


def tool_infos(schemas: Iterable[dict[str, Any]]) -> list[Any]:
    """OpenAI function schemas as inspect_ai's ToolInfo, which its model API sends the model."""
    from inspect_ai.tool import ToolInfo, ToolParams

    infos = []
    for schema in schemas:
        fn = schema.get("function", schema)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        infos.append(
            ToolInfo(
                name=fn["name"],
                description=fn.get("description") or fn["name"],
                parameters=ToolParams.model_validate(params),
            )
        )
    return infos


async def run_calls(message: Any, answer: Callable[[str, dict[str, Any]], Awaitable[str]]) -> list[Any]:
    """Run the tool calls of one assistant message through inspect_ai's ``execute_tools`` (so
    its log holds a tool event per call), in order, each answered by ``answer(name,
    arguments)``: the tool messages for the conversation, one per call, in the calls' order."""
    from inspect_ai.model import ChatMessageTool, execute_tools
    from inspect_ai.tool import ToolDef, ToolParams

    def route(name: str) -> ToolDef:
        async def execute(**kwargs: Any) -> str:
            return await answer(name, kwargs)

        # the model saw the scenario's schemas; these only route the call, so any arguments pass
        params = ToolParams(additionalProperties=True)
        return ToolDef(execute, name=name, description=name, parameters=params, max_output=0)

    defs = [route(name) for name in dict.fromkeys(c.function for c in message.tool_calls)]
    executed = await execute_tools([message], defs)
    by_id = {m.tool_call_id: m for m in executed.messages if isinstance(m, ChatMessageTool)}
    return [by_id[call.id] for call in message.tool_calls]
