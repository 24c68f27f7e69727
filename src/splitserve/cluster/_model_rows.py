"""Preflight's ``model`` rows: the GGUF the head loads is there, whole, and a GGUF; for vLLM /
SGLang, whose every node loads the model itself, the model folder on each node.

With the llama.cpp backend only the head reads the model (and the draft model): the workers get
their tensors from the head over RPC and hold no copy, so these rows are the head's. A model is
*whole* when every shard of its set is there and every shard is as long as its own GGUF header
says (the last tensor's offset plus its size); the header reader (:func:`~splitserve.model.read_gguf`)
checks both, and that the file starts with ``GGUF``.

The fix names what to run: ``splitserve fetch`` with the repository and files the folder's fetch
manifest recorded (it resumes), else the path it expected and a ``fetch`` example.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from .._errors import SplitserveError
from ._checks import CheckRow
from ._spec import ClusterSpec, draft_in_use

_SHARD = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")


def _fetch_source(model: Path) -> tuple[Path, str, str] | None:
    """(fetch folder, repository, the model's path in it as a glob of its shard set) from the
    nearest fetch manifest above ``model``; None when no fetch wrote that folder."""
    from ..fetch import MANIFEST

    for root in list(model.parents)[:4]:
        try:
            data = json.loads((root / MANIFEST).read_text())
        except (OSError, ValueError):
            continue
        files = data.get("files") if isinstance(data, dict) else None
        if not isinstance(files, dict) or not files:
            continue
        try:
            rel = model.relative_to(root).as_posix()
        except ValueError:
            continue
        m = _SHARD.match(model.name)
        pattern = rel if not m else f"{Path(rel).parent.as_posix()}/{m.group('stem')}-*-of-{m.group('n')}.gguf"
        pattern = pattern.removeprefix("./")
        repos = {str(e.get("repo_id")) for e in files.values() if isinstance(e, dict) and e.get("repo_id")}
        stem = m.group("stem") if m else model.name
        mine = {
            str(e.get("repo_id"))
            for p, e in files.items()
            if isinstance(e, dict) and e.get("repo_id") and Path(p).name.startswith(stem)
        }
        repo = next(iter(mine or repos), None)
        if repo:
            return root, repo, pattern
    return None


def fetch_fix(model: Path, key: str, where: str) -> str:
    """What to run to get ``model`` whole: the exact ``splitserve fetch`` when a fetch manifest
    says where it came from, else the path expected and a fetch example."""
    src = _fetch_source(model)
    if src is not None:
        root, repo, pattern = src
        return (
            f"splitserve fetch {shlex.quote(repo)} --include {shlex.quote(pattern)} --dir {shlex.quote(str(root))} "
            "(resumes the download)"
        )
    return (
        f"put the GGUF at {model} (e.g. splitserve fetch ORG/NAME-GGUF --quant QUANT --dir {model.parent}), "
        f"or set {key} in {where} to the model's first file"
    )


def _partial_downloads(model: Path) -> list[str]:
    """Files `splitserve fetch` is still writing (or was, before an interruption) for this model."""
    m = _SHARD.match(model.name)
    stem = m.group("stem") if m else model.name.removesuffix(".gguf")
    try:
        return sorted(p.name for p in model.parent.glob(f"{glob_escape(stem)}*.gguf.incomplete"))
    except OSError:
        return []


def glob_escape(text: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", text)


def check_model(model: Path, key: str, where: str, node: str = "head") -> CheckRow:
    """One ``model`` row: pass with its size and shards, or fail with what is wrong and the fix."""
    from ..model import read_gguf

    try:
        gguf = read_gguf(model)
    except SplitserveError as exc:
        message = str(exc)
        if not model.exists() and not model.parent.exists():
            message = f"{model}: no such file (and no folder {model.parent})"
        partial = _partial_downloads(model)
        if partial:
            message += f"; a download is unfinished here ({', '.join(partial[:2])})"
        return CheckRow("model", node, "fail", f"{key}: {message}", fetch_fix(model, key, where))
    except OSError as exc:
        return CheckRow(
            "model",
            node,
            "fail",
            f"{key}: {model}: cannot read ({exc.strerror or exc})",
            "check the file's permissions",
        )
    size = sum(p.stat().st_size for p in gguf.shards)
    shards = f", {len(gguf.shards)} shards" if len(gguf.shards) > 1 else ""
    return CheckRow(
        "model",
        node,
        "pass",
        f"{key}: {model} is a whole GGUF ({size / (1 << 30):.2f} GiB{shards}, {len(gguf.tensors)} tensors); "
        "the workers get their tensors over RPC and need no copy",
    )


def model_rows(spec: ClusterSpec) -> list[CheckRow]:
    """The ``model`` rows of a llama.cpp spec: the model and, when speculation uses one, the draft
    model, both read on the head."""
    where = str(spec.source_file or "the spec")
    rows = [check_model(spec.model, "model", where)]
    dm = spec.server.draft_model
    if dm is not None and draft_in_use(spec.server):
        rows.append(check_model(dm, "server.draft_model", where))
    return rows


# -- vLLM / SGLang: every node loads the model itself ------------------------------------------

MODEL_FACT = "model"
_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".gguf")
_INDEX = "model.safetensors.index.json"


def is_model_path(model: str) -> bool:
    """A vLLM / SGLang ``model`` that names a folder (or file) on the nodes, not a hub id."""
    return model.startswith(("/", "~", "./", "../"))


def model_fact_command(model: str) -> list[str]:
    """The command whose output :func:`engine_model_row` reads: what the node holds at ``model``
    (a folder's listing and its safetensors index, or a file's first bytes)."""
    from .._node import sh_path

    script = (
        f"p={sh_path(model.rstrip('/') or '/')}; "
        'if [ -d "$p" ]; then echo DIR; ls -A "$p"; '
        f'if [ -f "$p/{_INDEX}" ]; then echo INDEX; cat "$p/{_INDEX}"; fi; '
        'elif [ -f "$p" ]; then echo FILE; head -c 4 "$p"; echo; '
        "else echo MISSING; fi"
    )
    return ["sh", "-c", script]


def engine_model_row(model: str, node: str, host: str, output: tuple[int, str] | None) -> CheckRow:
    """The ``model`` row of one vLLM / SGLang node from :func:`model_fact_command`'s output: there,
    whole (every shard its safetensors index names, no unfinished download), a model folder."""
    where = "this machine" if host in ("local", "localhost") else host
    fix = (
        f"copy it there (rsync -a {model.rstrip('/')}/ {host}:{model.rstrip('/')}/) or run the same "
        "splitserve fetch there"
        if where != "this machine"
        else f"put the model at {model} (e.g. splitserve fetch ORG/NAME --dir {model})"
    )
    if output is None or output[0] != 0 or not output[1].strip():
        return CheckRow("model", node, "skip", f"could not look for {model} on {where}")
    lines = output[1].splitlines()
    kind = lines[0].strip()
    if kind == "MISSING":
        return CheckRow("model", node, "fail", f"{model} is not on {where} (every node loads the model itself)", fix)
    if kind == "FILE":
        magic = lines[1].strip() if len(lines) > 1 else ""
        if magic != "GGUF":
            return CheckRow("model", node, "fail", f"{model} on {where} is a file but not a GGUF", fix)
        return CheckRow("model", node, "pass", f"{model} on {where}: a GGUF file")
    body = lines[1:]
    index_text = ""
    if "INDEX" in body:
        i = body.index("INDEX")
        body, index_text = body[:i], "\n".join(body[i + 1 :])
    names = {n.strip() for n in body if n.strip()}
    unfinished = sorted(n for n in names if n.endswith(".incomplete"))
    if unfinished:
        return CheckRow(
            "model", node, "fail", f"{model} on {where}: a download is unfinished ({', '.join(unfinished[:2])})", fix
        )
    if index_text:
        try:
            wanted = set(json.loads(index_text).get("weight_map", {}).values())
        except (ValueError, AttributeError):
            return CheckRow("model", node, "fail", f"{model} on {where}: unreadable {_INDEX}", fix)
        missing = sorted(wanted - names)
        if missing:
            return CheckRow(
                "model",
                node,
                "fail",
                f"{model} on {where}: {len(missing)} of {len(wanted)} weight shards missing ({', '.join(missing[:3])})",
                fix,
            )
    if "config.json" not in names:
        return CheckRow("model", node, "fail", f"{model} on {where}: no config.json, not a model folder", fix)
    weights = [n for n in names if n.endswith(_WEIGHTS)]
    if not weights:
        return CheckRow("model", node, "fail", f"{model} on {where}: config.json but no weight files", fix)
    return CheckRow("model", node, "pass", f"{model} on {where}: config.json and {len(weights)} weight file(s)")


__all__ = [
    "MODEL_FACT",
    "check_model",
    "engine_model_row",
    "fetch_fix",
    "is_model_path",
    "model_fact_command",
    "model_rows",
]
