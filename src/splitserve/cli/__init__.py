"""The ``splitserve`` command: thin wrappers that parse options, call one library
function and map :class:`splitserve.SplitserveError` to a one-line message and an
exit code."""

from __future__ import annotations

from ._app import app, main

__all__ = ["app", "main"]
