"""Model downloads: hub listing, parallel ranged transfer, resume, verification.

``fetch_repo(FetchOptions(repo_id, quants=["UD-IQ4_XS"], dir=...), on_event=...)`` lists the
repository through ``huggingface_hub`` (``HF_TOKEN``, ``HF_ENDPOINT``), selects a shard set, and
pulls each file with parallel HTTP range requests from its presigned storage URL, resuming from
the state file beside each partial, and renames a file into place only once its size and
SHA-256 match.
"""

from ._errors import DiskSpaceError, FetchError, HubError, VerifyError
from ._fetch import FetchFailed, FetchOptions, FetchPlan
from ._run import FetchEvents, fetch_repo, plan_line, size_label
from ._verify import MANIFEST, verify_dir

__all__ = [
    "MANIFEST",
    "DiskSpaceError",
    "FetchError",
    "FetchEvents",
    "FetchFailed",
    "FetchOptions",
    "FetchPlan",
    "HubError",
    "VerifyError",
    "fetch_repo",
    "plan_line",
    "size_label",
    "verify_dir",
]
