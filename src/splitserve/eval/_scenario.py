"""Scenarios: Toolery's YAML format as it is, plus three optional keys of ours.

A Toolery scenario (karolpalys/toolery ``docs/spec.md`` §3) names its tools, scripts what
each tool answers (``tool_responses``: rules with ``match`` / ``<param>_regex`` /
``call_index`` / ``match_index`` / ``if_tool_called`` / ``if_tool_not_called``) and grades
the trial with check primitives in ``scoring.required`` / ``forbidden`` / ``partial``.
Unknown keys are kept (a newer Toolery field does not make a file unloadable).

Our additions, which Toolery ignores:

- ``tool_schemas``: {name: OpenAI function schema} for tools not in the known registry
  (``_tools``);
- ``sandbox``: a spec for stateful mock tools (``_sandbox.make_sandbox``); tools it handles
  are answered by it instead of by ``tool_responses``;
- ``oracle``: the ideal play, a list of assistant turns (``{tool_calls: [{name, arguments}]}``
  or ``{content: ...}``), which the scripted test agents (``_agents``) replay.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TIERS = ("easy", "medium", "hard", "very_hard")
Tier = Literal["easy", "medium", "hard", "very_hard"]


class Budget(BaseModel):
    model_config = ConfigDict(extra="allow")

    max_tool_calls: int = Field(default=10, ge=0)
    max_turns: int = Field(default=10, ge=1)
    timeout_seconds: float = Field(default=60, gt=0)
    # ours: completion tokens over the whole trial (absolute, never scaled)
    max_tokens: int | None = Field(default=None, ge=1)


class ToolResponseRule(BaseModel):
    model_config = ConfigDict(extra="allow")

    match: Any = "any"
    returns: Any = None
    returns_with_injection: str | None = None
    depends_on: str | None = None
    call_index: int | str | None = None
    match_index: int | str | None = None
    if_tool_called: str | None = None
    if_tool_not_called: str | None = None


class Check(BaseModel):
    """One check primitive: ``check`` names it, the other keys are its parameters."""

    model_config = ConfigDict(extra="allow")

    check: str

    def params(self) -> dict[str, Any]:
        return self.model_dump()


class Scoring(BaseModel):
    model_config = ConfigDict(extra="allow")

    required: list[Check] = []
    forbidden: list[Check] = []
    partial: list[Check] = []
    weights: dict[str, float] = {"pass": 1.0, "partial": 0.5, "fail": 0.0}


class OracleCall(BaseModel):
    name: str
    arguments: dict[str, Any] = {}


class OracleTurn(BaseModel):
    content: str | None = None
    tool_calls: list[OracleCall] = []


class Scenario(BaseModel):
    model_config = ConfigDict(extra="allow")

    id: str
    title: str = ""
    tier: Tier
    category: str
    domain: str = "generic"
    description: str = ""
    tags: list[str] = []
    ranking_dimensions: list[str] = ["overall"]
    prompt: str
    system_prompt: str | None = None
    tools: list[str] = []
    context_prefill_tokens: int = 0
    context_prefill_template: str | None = None
    budget: Budget = Budget()
    tool_responses: dict[str, list[ToolResponseRule]] = {}
    scoring: Scoring = Scoring()
    # ours
    tool_schemas: dict[str, dict[str, Any]] = {}
    sandbox: dict[str, Any] | None = None
    oracle: list[OracleTurn] = []
    source: str = ""  # the file it came from, or "builtin:<template>"
