"""The llama.cpp engine: building it, finding its binaries, reading its provenance."""

from __future__ import annotations

from ._backend import (
    DOWN_RETRY_AFTER,
    CompletionRequest,
    CompletionStream,
    EngineBackend,
    EngineHealth,
    EngineInfo,
    EngineReply,
    EngineStreamError,
    engine_message,
)
from ._build import BuildEvent, BuildNote, BuildOptions, build_engine, build_summary
from ._client import BlockingEngine, EngineHTTPError, EngineUnavailable
from ._engine import Engine, get_engine, list_engines, version_text
from ._fake import FakeEngine, FakeOutput
from ._llamacpp import LlamaCppBackend
from ._smoke import Check, SmokeEdges, SmokeProcess, SmokeReport, check_rpc, machine_fingerprint, smoke_test
from ._source import resolve_source
from ._tiny import tiny_model
from ._vllm import VllmBackend, backend_for, split_engine_url

__all__ = [
    "DOWN_RETRY_AFTER",
    "BlockingEngine",
    "BuildEvent",
    "BuildNote",
    "BuildOptions",
    "Check",
    "CompletionRequest",
    "CompletionStream",
    "Engine",
    "EngineBackend",
    "EngineHTTPError",
    "EngineHealth",
    "EngineInfo",
    "EngineReply",
    "EngineStreamError",
    "EngineUnavailable",
    "FakeEngine",
    "FakeOutput",
    "LlamaCppBackend",
    "SmokeEdges",
    "SmokeProcess",
    "SmokeReport",
    "VllmBackend",
    "backend_for",
    "build_engine",
    "build_summary",
    "check_rpc",
    "engine_message",
    "get_engine",
    "list_engines",
    "machine_fingerprint",
    "resolve_source",
    "smoke_test",
    "split_engine_url",
    "tiny_model",
    "version_text",
]
