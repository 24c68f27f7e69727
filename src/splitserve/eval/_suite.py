"""Finding and loading a suite: a folder of scenario files, or a built-in suite by name."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .._errors import UsageError
from ._scenario import Scenario

# splitserve's own suite: package `builtin`, templates with seeded values over the sandbox
BUILTIN: tuple[str, ...] = ("builtin",)
SCENARIO_SUFFIXES = (".yaml", ".yml")


@dataclass
class Problem:
    """A file that could not be loaded, and why (one line)."""

    path: str
    reason: str


@dataclass
class Suite:
    name: str
    scenarios: list[Scenario] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    # loaded, with something the user should know (a tool without a schema got a permissive one)
    warnings: list[Problem] = field(default_factory=list)

    def select(self, tier: str | None = None, category: str | None = None, limit: int | None = None) -> list[Scenario]:
        chosen = [
            s
            for s in self.scenarios
            if (tier is None or s.tier == tier) and (category is None or s.category == category)
        ]
        return chosen[:limit] if limit is not None else chosen


def _reason(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "(top level)"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def load_file(path: Path) -> Scenario:
    """One scenario file; raises ValueError with a one-line reason."""
    import yaml

    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read: {exc}") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        raise ValueError(f"not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise ValueError(f"a scenario is a mapping, this file holds {type(data).__name__}")
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        raise ValueError(_reason(exc)) from None
    scenario.source = str(path)
    return scenario


def permissive_schema(name: str) -> dict[str, Any]:
    """An OpenAI function schema that takes any arguments, for a tool we know nothing of."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name.replace('_', ' ')} tool.",
            "parameters": {"type": "object", "properties": {}, "additionalProperties": True},
        },
    }


def _check_tools(scenario: Scenario) -> str | None:
    """Give each tool without a schema a permissive one; the warning that says so, or None.

    Toolery's scorer never needs a schema, so a scenario naming a tool we do not know (its
    very-hard-19 uses ``deploy``) still loads and runs: the model sees the tool with free
    arguments, and the scenario's ``tool_responses`` answer it."""
    from ._tools import schemas_for

    sandbox_tools: set[str] = set()
    if scenario.sandbox is not None:
        from ._sandbox import SANDBOX

        sandbox_tools = set(SANDBOX)
    _, missing = schemas_for([t for t in scenario.tools if t not in sandbox_tools], scenario.tool_schemas)
    if not missing:
        return None
    for name in missing:
        scenario.tool_schemas[name] = permissive_schema(name)
    return (
        f"tools without a schema: {', '.join(missing)}; they take any arguments "
        "(give their schemas under tool_schemas: {name: OpenAI function schema})"
    )


def load_folder(root: Path) -> Suite:
    suite = Suite(name=str(root))
    seen: dict[str, str] = {}
    for path in sorted(p for p in root.rglob("*") if p.suffix in SCENARIO_SUFFIXES and p.is_file()):
        try:
            scenario = load_file(path)
        except ValueError as exc:
            suite.problems.append(Problem(str(path), str(exc)))
            continue
        if scenario.id in seen:
            suite.problems.append(Problem(str(path), f"duplicate id {scenario.id!r} (also in {seen[scenario.id]})"))
            continue
        if scenario.sandbox is not None:
            from ._sandbox import check_spec

            try:
                check_spec(scenario.sandbox)
            except ValueError as exc:  # found at load (eval list), not when a trial makes its workspace
                suite.problems.append(Problem(str(path), f"sandbox: {exc}"))
                continue
        if (why := _check_tools(scenario)) is not None:
            suite.warnings.append(Problem(str(path), why))
        seen[scenario.id] = str(path)
        suite.scenarios.append(scenario)
    return suite


def load_suite(name: str) -> Suite:
    """SUITE as the CLI takes it: a built-in name, or a folder (searched recursively)."""
    if name in BUILTIN:
        from .builtin import scenarios

        return Suite(name=name, scenarios=scenarios())
    if name == "bfcl" or name.startswith("bfcl:"):  # BFCL's items from the bfcl-eval package
        from ._bfcl import load_bfcl

        return Suite(name=name, scenarios=load_bfcl(name))
    path = Path(name)
    if path.is_file() and path.suffix in SCENARIO_SUFFIXES:
        suite = Suite(name=str(path))
        try:
            scenario = load_file(path)
        except ValueError as exc:
            suite.problems.append(Problem(str(path), str(exc)))
            return suite
        if (why := _check_tools(scenario)) is not None:
            suite.warnings.append(Problem(str(path), why))
        suite.scenarios.append(scenario)
        return suite
    if not path.is_dir():
        raise UsageError(
            f"suite {name!r}: no such folder, and not a built-in suite (built in: {', '.join(BUILTIN) or 'none yet'})"
        )
    suite = load_folder(path)
    if not suite.scenarios and not suite.problems:
        raise UsageError(f"suite {name!r}: no scenario files (*.yaml, *.yml) in this folder")
    return suite
