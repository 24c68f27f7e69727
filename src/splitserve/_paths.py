"""Where splitserve keeps its files.

``SPLITSERVE_CACHE`` moves the engine builds and sources, ``SPLITSERVE_STATE``
the running clusters' pids and logs; otherwise the XDG defaults apply.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """Engine builds and downloaded sources: ``~/.cache/splitserve`` by default."""
    override = os.environ.get("SPLITSERVE_CACHE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "splitserve"


def engines_dir() -> Path:
    """Built engines, one folder per cache key."""
    return cache_dir() / "engines"


def sources_dir() -> Path:
    """Downloaded and unpacked llama.cpp sources."""
    return cache_dir() / "sources"


def state_dir() -> Path:
    """Running clusters' pids and logs: ``~/.local/state/splitserve`` by default."""
    override = os.environ.get("SPLITSERVE_STATE")
    if override:
        return Path(override)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "splitserve"
