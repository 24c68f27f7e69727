"""API keys: one from the command line, or a keys file that stores only their hashes.

A keys file has one key per line, ``NAME sha256:HEX`` (``#`` starts a comment). Keys are
random 32-byte tokens (:func:`new_key`), so an unsalted SHA-256 is the right hash: a
brute-force search of the key space is hopeless, and comparing digests with
:func:`hmac.compare_digest` leaks nothing about the stored value. The gateway refuses to
bind beyond loopback without a key (:func:`require_auth_off_loopback`).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from pathlib import Path

from .._errors import SpecError, UsageError
from .._net import is_loopback


def hash_key(key: str) -> str:
    return "sha256:" + hashlib.sha256(key.encode()).hexdigest()


def new_key() -> str:
    return "sk-ss-" + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class KeyRing:
    """Accepted keys as ``{hash: name}``; empty means no auth (loopback only)."""

    hashes: dict[str, str]

    @classmethod
    def build(cls, api_key: str | None = None, keys_file: Path | None = None) -> KeyRing:
        hashes: dict[str, str] = {}
        if api_key:
            hashes[hash_key(api_key)] = "default"
        if keys_file is not None:
            hashes.update(load_keys_file(keys_file))
        return cls(hashes)

    @property
    def enabled(self) -> bool:
        return bool(self.hashes)

    def check(self, authorization: str | None) -> str | None:
        """The key's name for an ``Authorization: Bearer KEY`` header, or None."""
        if not authorization or not authorization.lower().startswith("bearer "):
            return None
        return self.check_key(authorization[7:])

    def check_key(self, key: str | None) -> str | None:
        """The key's name for a bare key (Anthropic's ``x-api-key`` header), or None."""
        if not key or not key.strip():
            return None
        digest = hash_key(key.strip())
        for stored, name in self.hashes.items():
            if hmac.compare_digest(stored, digest):
                return name
        return None


def load_keys_file(path: Path) -> dict[str, str]:
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the keys file: {exc.strerror}") from None
    out: dict[str, str] = {}
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or not parts[1].startswith("sha256:") or len(parts[1]) != 71:
            raise SpecError(f"{path}:{n}: expected 'NAME sha256:HEX'; add keys with `splitserve keys add`")
        out[parts[1].lower()] = parts[0]
    return out


def add_key(path: Path, name: str) -> str:
    """Create a key, append its hash to ``path`` under ``name``, return the key (shown once)."""
    if not name or any(c.isspace() for c in name) or "#" in name:
        raise UsageError(f"key name {name!r}: use letters, digits, '-' or '_'")
    existing = load_keys_file(path) if path.exists() else {}
    if name in existing.values():
        raise UsageError(f"{path}: a key named {name!r} exists already; pick another name")
    key = new_key()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as f:
            f.write(f"{name} {hash_key(key)}\n")
        path.chmod(0o600)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the keys file: {exc.strerror}") from None
    return key


def require_auth_off_loopback(host: str, keys: KeyRing) -> None:
    if not is_loopback(host) and not keys.enabled:
        raise UsageError(
            f"--host {host} binds beyond loopback: pass --api-key or --keys-file "
            "(the gateway refuses to serve other machines without auth)"
        )


__all__ = ["KeyRing", "add_key", "hash_key", "is_loopback", "load_keys_file", "new_key", "require_auth_off_loopback"]
