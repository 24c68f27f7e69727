"""The hub boundary: list a repository at a commit, resolve a file to where its bytes are.

:class:`Hub` is the interface (two methods); :class:`HfHub` implements it with
``huggingface_hub``, which honours ``HF_TOKEN`` (and a stored login) and ``HF_ENDPOINT``.
Listing is one model-info call with blob metadata (sizes, LFS sha256 oids, git blob ids) at
the revision, pinned to the commit it resolves to.  Resolving is the metadata HEAD on
``/{repo}/resolve/{commit}/{path}``: for an LFS file the hub answers with a redirect to a
presigned storage URL (``Location``) and the file's sha256 and size in ``X-Linked-Etag`` /
``X-Linked-Size``; the transfer then talks plain HTTP ranges to that URL, without the token.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from ._errors import HubError
from ._select import RemoteFile


@dataclass(frozen=True)
class Listing:
    """A repository's files at one commit."""

    repo_id: str
    revision: str  # as asked (branch, tag or sha)
    commit: str  # the sha it resolved to
    files: list[RemoteFile]


@dataclass(frozen=True)
class Resolved:
    """Where to GET a file's bytes, and the headers that request needs."""

    url: str
    headers: dict[str, str] = field(default_factory=dict)
    size: int | None = None
    etag: str | None = None  # sha256 for an LFS file, git blob id otherwise


class Hub(abc.ABC):
    """What the fetcher needs from a model hub."""

    endpoint: str

    @abc.abstractmethod
    def list_files(self, repo_id: str, revision: str | None = None) -> Listing:
        """The repository's files with sizes and hashes, pinned to one commit."""

    @abc.abstractmethod
    def resolve(self, repo_id: str, commit: str, path: str) -> Resolved:
        """A fresh download URL for one file (call again when the URL expires)."""


def _origin(url: str) -> tuple[str, str, int | None]:
    u = urlsplit(url)
    return u.scheme, (u.hostname or "").lower(), u.port


class HfHub(Hub):
    """:class:`Hub` over ``huggingface_hub`` (``HF_ENDPOINT``, ``HF_TOKEN`` honoured)."""

    def __init__(self, endpoint: str | None = None, token: str | None = None) -> None:
        from huggingface_hub import HfApi, get_token

        self.endpoint = (endpoint or os.environ.get("HF_ENDPOINT") or "https://huggingface.co").rstrip("/")
        self.token = token if token is not None else get_token()
        self._api = HfApi(endpoint=self.endpoint, token=self.token or False)

    def _convert(self, exc: Exception, what: str) -> HubError:
        from huggingface_hub import errors

        if isinstance(exc, errors.GatedRepoError):
            return HubError(
                f"{what}: the repository is gated; accept its terms on the hub and set "
                "HF_TOKEN to a token of that account"
            )
        if isinstance(exc, errors.RevisionNotFoundError):
            return HubError(f"{what}: no such revision; check --revision")
        if isinstance(exc, errors.RepositoryNotFoundError):
            hint = "check the name" + ("" if self.token else ", or set HF_TOKEN if it is private")
            return HubError(f"{what}: repository not found at {self.endpoint} ({hint})")
        if isinstance(exc, errors.EntryNotFoundError):
            return HubError(f"{what}: the file is not in the repository at that commit")
        if isinstance(exc, errors.HFValidationError):
            return HubError(f"{what}: not a repository id ({exc}); use NAMESPACE/NAME, e.g. unsloth/MiniMax-M2-GGUF")
        if isinstance(exc, errors.HfHubHTTPError):
            status = exc.response.status_code if exc.response is not None else "?"
            if status == 404:
                return HubError(f"{what}: not found at {self.endpoint} (HTTP 404); check the name")
            return HubError(f"{what}: the hub at {self.endpoint} answered HTTP {status}; try again later")
        return HubError(
            f"{what}: cannot reach the hub at {self.endpoint} "
            f"({type(exc).__name__}: {exc}); check the network or HF_ENDPOINT"
        )

    def _exists(self, exc: Exception, repo_id: str) -> bool:
        """After a repository-not-found error for a revision: does the repository exist at all?"""
        from huggingface_hub import errors

        if not isinstance(exc, errors.RepositoryNotFoundError) or isinstance(exc, errors.GatedRepoError):
            return False
        try:
            self._api.model_info(repo_id)
        except Exception:  # noqa: BLE001  (not there, not reachable: the first error stands)
            return False
        return True

    def list_files(self, repo_id: str, revision: str | None = None) -> Listing:
        try:
            info = self._api.model_info(repo_id, revision=revision, files_metadata=True)
        except Exception as exc:  # huggingface_hub and httpx errors, converted at the boundary
            from huggingface_hub import errors

            if revision is not None and (isinstance(exc, errors.RevisionNotFoundError) or self._exists(exc, repo_id)):
                # a hub (or mirror) that answers "repository not found" for an unknown revision
                raise HubError(
                    f"{repo_id}: no revision {revision!r} (branch, tag or commit); check --revision"
                ) from exc
            raise self._convert(exc, repo_id) from exc
        if not info.sha:
            raise HubError(f"{repo_id}: the hub did not say which commit {revision or 'main'} is")
        files = []
        for s in info.siblings or []:
            if s.lfs is not None:
                files.append(RemoteFile(s.rfilename, int(s.lfs.size), s.lfs.sha256, s.blob_id))
            else:
                files.append(RemoteFile(s.rfilename, int(s.size or 0), None, s.blob_id))
        return Listing(repo_id, revision or "main", info.sha, sorted(files, key=lambda f: f.path))

    def resolve(self, repo_id: str, commit: str, path: str) -> Resolved:
        from huggingface_hub import get_hf_file_metadata, hf_hub_url
        from huggingface_hub.utils import build_hf_headers  # type: ignore[attr-defined]  # its __all__ is built at run time

        url = hf_hub_url(repo_id, path, revision=commit, endpoint=self.endpoint)
        try:
            meta = get_hf_file_metadata(url, token=self.token or False, endpoint=self.endpoint, retry_on_errors=True)
        except Exception as exc:
            raise self._convert(exc, f"{repo_id}/{path}") from exc
        location = meta.location or url
        headers: dict[str, str] = {}
        if _origin(location) == _origin(self.endpoint):
            # the bytes come from the hub itself (a small file): that request needs the token;
            # a storage URL is presigned and must never see it
            headers = build_hf_headers(token=self.token or False)
        headers["Accept-Encoding"] = "identity"
        return Resolved(location, headers, meta.size, meta.etag)
