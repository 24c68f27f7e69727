"""Writing a setup's files under a home folder (a throwaway one, or the user's)."""

from __future__ import annotations

from pathlib import Path

from ._build import ClientSetup, claude_code_settings


def write_setup(setup: ClientSetup, home: Path) -> list[Path]:
    """Write ``setup.files`` under ``home``; returns the paths written. Claude Code's
    ``settings.json`` is merged into an existing one (its other keys kept); other files are
    replaced whole (they hold only what ``connect`` writes)."""
    written = []
    for rel, text in setup.files.items():
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if rel == ".claude/settings.json" and path.is_file():
            text = claude_code_settings(setup.env, path.read_text())
        path.write_text(text)
        if rel.endswith((".aider.conf.yml", "settings.json")):
            path.chmod(0o600)  # they may hold the key
        written.append(path)
    return written
