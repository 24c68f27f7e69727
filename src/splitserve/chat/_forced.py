"""The forced tool call of one format: :func:`tool_call_grammar` joins a :class:`ToolCallFormat`
(its ``call_grammar`` hook and reasoning markers) to the grammar primitives of ``_grammar``.

Kept apart from ``_grammar`` so that the formats (``_format`` and the ``_fmt_*`` modules) can
import the primitives without an import cycle.
"""

from __future__ import annotations

from typing import Any

from ._format import ToolCallFormat
from ._grammar import GrammarBuilder, GrammarError, lit, tools_for_grammar


def tool_call_grammar(
    fmt: ToolCallFormat,
    tools: list[dict[str, Any]] | None,
    *,
    name: str | None = None,
    parallel: bool = True,
    prefilled: bool = False,
    reasoning: bool = True,
) -> str:
    """A GBNF grammar forcing a tool call in ``fmt``'s syntax (see the module docstring).

    ``tools`` are the request's tools (OpenAI shape); ``name`` restricts the call to that
    function; ``parallel`` allows one or more calls (else exactly one); ``prefilled`` says
    the prompt ends with the reasoning opener (the output starts inside reasoning, so the
    closer must come first); ``reasoning=False`` offers no reasoning block (the prompt
    already closed it, e.g. thinking disabled). :class:`GrammarError` when the format
    writes no calls or no tool is allowed.
    """
    hook = fmt.call_grammar
    if hook is None:
        raise GrammarError(f"the {fmt.name} format writes no tool calls")
    allowed = tools_for_grammar(tools, name)
    if not allowed:
        what = f"no tool named {name!r}" if name is not None else "no tools"
        raise GrammarError(f"cannot force a tool call: the request declares {what}")
    g = GrammarBuilder()
    calls = g.rule("tool-calls", hook(g, allowed, parallel))
    spec = fmt.reasoning
    if spec is None:
        return g.render(calls)
    gap = "[ \\t\\n]{0,4}"
    if prefilled:
        return g.render(f"{g.until(spec.close)} {gap} {calls}")
    if not reasoning:
        return g.render(calls)
    think = g.rule("reasoning", f"{lit(spec.open)} {g.until(spec.close)} {gap}")
    return g.render(f"{think}? {calls}")


__all__ = ["tool_call_grammar"]
