"""The parts of the ``bfcl-eval`` package we call, imported without its heavy dependencies.

BFCL (the Berkeley Function Calling Leaderboard, Apache-2.0) ships its data and its graders
in the ``bfcl-eval`` wheel. Its declared dependencies pin numpy and pull every provider SDK
and vLLM-era stacks; the graders themselves need only ``mpmath`` (its MathAPI) and
``filelock``. So it is installed with ``--no-deps`` (``scripts/setup.sh``), and two imports
that would drag the model handlers in are satisfied here before the graders load:

- ``bfcl_eval.constants.model_config`` (``MODEL_CONFIG_MAPPING`` imports every handler): the
  AST checker reads one field of it, ``underscore_to_dot``, which is true for every model
  that gets BFCL's functions as OpenAI tools (names with ``.`` sent as ``_``), as ours do;
- the Java and JavaScript call parsers (tree-sitter): used only to decode prompt-mode
  output of the Java/JS categories, which this suite does not run.

Nothing of BFCL's grading is rewritten: :func:`api` hands out its own functions.
"""

from __future__ import annotations

import os
import sys
import types
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .._errors import UsageError

INSTALL_HINT = (
    "BFCL needs the bfcl-eval package, installed without its dependencies: "
    "pip install --no-deps bfcl-eval && pip install mpmath filelock (scripts/setup.sh does this)"
)


class _FcConfig:
    underscore_to_dot = True  # the model got OpenAI tools, dots in names replaced by "_"


class _FcMapping(dict[str, Any]):
    """MODEL_CONFIG_MAPPING for any model name: every model here is in BFCL's FC mode."""

    def __missing__(self, key: str) -> Any:
        return _FcConfig()


@dataclass(frozen=True)
class Bfcl:
    """BFCL's own functions (see the module docstring)."""

    ast_checker: Any
    multi_turn_checker: Any
    multi_turn_irrelevance_checker: Any
    execute_multi_turn_func_call: Any
    is_empty_execute_response: Any
    convert_to_tool: Any
    convert_to_function_call: Any
    is_function_calling_format_output: Any
    is_empty_output: Any
    load_dataset_entry: Any
    load_ground_truth_entry: Any
    language: Any  # bfcl_eval.constants.enums.Language
    gorilla_to_openapi: dict[str, str]
    openai_style: Any  # ModelStyle.OPENAI_COMPLETIONS
    class_paths: dict[str, str]
    max_steps: int
    data_dir: Path
    version: str
    multi_turn_utils: types.ModuleType


def _stub(name: str, **attrs: Any) -> None:
    if name in sys.modules:
        return
    module = types.ModuleType(name)
    module.__dict__.update(attrs)
    sys.modules[name] = module


def _not_here(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("Java/JavaScript prompt-mode parsing is not available (tree-sitter is not installed)")


@cache
def api() -> Bfcl:
    """Import bfcl-eval's graders and loaders once; UsageError when it is not installed."""
    try:
        import bfcl_eval  # noqa: F401
    except ImportError:
        raise UsageError(INSTALL_HINT) from None
    # BFCL keeps lock files under its "project root", by default beside the installed package
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "splitserve" / "bfcl"
    root.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(root))
    _stub("bfcl_eval.constants.model_config", MODEL_CONFIG_MAPPING=_FcMapping())
    _stub("bfcl_eval.model_handler.parser.java_parser", parse_java_function_call=_not_here)
    _stub("bfcl_eval.model_handler.parser.js_parser", parse_javascript_function_call=_not_here)
    try:
        from bfcl_eval import utils
        from bfcl_eval.constants import default_prompts, enums, eval_config, executable_backend_config, type_mappings
        from bfcl_eval.eval_checker.ast_eval import ast_checker
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
        from bfcl_eval.model_handler import utils as handler_utils
    except ImportError as exc:
        raise UsageError(f"bfcl-eval does not import ({exc}); {INSTALL_HINT}") from None
    # when the real model_config was importable it came first; the checker must still see FC mode
    ast_checker.MODEL_CONFIG_MAPPING = _FcMapping()
    from importlib.metadata import version

    return Bfcl(
        ast_checker=ast_checker.ast_checker,
        multi_turn_checker=multi_turn_checker.multi_turn_checker,
        multi_turn_irrelevance_checker=multi_turn_checker.multi_turn_irrelevance_checker,
        execute_multi_turn_func_call=multi_turn_utils.execute_multi_turn_func_call,
        is_empty_execute_response=multi_turn_utils.is_empty_execute_response,
        convert_to_tool=handler_utils.convert_to_tool,
        convert_to_function_call=handler_utils.convert_to_function_call,
        is_function_calling_format_output=utils.is_function_calling_format_output,
        is_empty_output=utils.is_empty_output,
        load_dataset_entry=utils.load_dataset_entry,
        load_ground_truth_entry=utils.load_ground_truth_entry,
        language=enums.Language,
        gorilla_to_openapi=dict(type_mappings.GORILLA_TO_OPENAPI),
        openai_style=enums.ModelStyle.OPENAI_COMPLETIONS,
        class_paths=dict(executable_backend_config.CLASS_FILE_PATH_MAPPING),
        max_steps=int(default_prompts.MAXIMUM_STEP_LIMIT),
        data_dir=Path(eval_config.PROMPT_PATH),
        version=version("bfcl-eval"),
        multi_turn_utils=multi_turn_utils,
    )
