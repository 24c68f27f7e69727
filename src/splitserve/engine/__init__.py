"""The llama.cpp engine: building it, finding its binaries, reading its provenance."""

from __future__ import annotations

from ._build import BuildOptions, BuildPlan, build_engine, cmake_arguments, plan_build
from ._client import EngineClient, EngineHTTPError, EngineUnavailable
from ._engine import Engine, get_engine, list_engines, load_engine, version_text
from ._source import DEFAULT_SOURCE, SourceTree, resolve_source

__all__ = [
    "DEFAULT_SOURCE",
    "BuildOptions",
    "BuildPlan",
    "Engine",
    "EngineClient",
    "EngineHTTPError",
    "EngineUnavailable",
    "SourceTree",
    "build_engine",
    "cmake_arguments",
    "get_engine",
    "list_engines",
    "load_engine",
    "plan_build",
    "resolve_source",
    "version_text",
]
