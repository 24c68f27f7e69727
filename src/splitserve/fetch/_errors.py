"""Errors of the fetch layer (children of :class:`splitserve.SplitserveError`).

SplitserveError
└── FetchError            listing, transfer or verification of a download failed
    ├── HubError          the hub refused or could not answer (repo, revision, auth)
    ├── DiskSpaceError    not enough free space for what is left to fetch
    └── VerifyError       a file's size or SHA-256 does not match the hub's
"""

from __future__ import annotations

from .._errors import SplitserveError


class FetchError(SplitserveError):
    """A download could not be listed, transferred or verified."""


class HubError(FetchError):
    """The hub API refused the request or could not be reached."""


class DiskSpaceError(FetchError):
    """Not enough free disk space for the bytes still to fetch."""


class VerifyError(FetchError):
    """A downloaded file does not match the hub's size or hash."""
