"""Model downloads: hub listing, parallel ranged transfer, resume, verification.

``fetch(FetchOptions(repo_id, quants=["UD-IQ4_XS"], dir=...))`` lists the repository through
``huggingface_hub`` (``HF_TOKEN``, ``HF_ENDPOINT``), selects a shard set, and pulls each file
with parallel HTTP range requests from its presigned storage URL, resuming from the state
file beside each partial, and renames a file into place only once its size and SHA-256 match.
"""

from ._errors import DiskSpaceError, FetchError, HubError, VerifyError
from ._fetch import (
    FetchFailed,
    FetchOptions,
    FetchPlan,
    FetchResult,
    FileOutcome,
    PlannedFile,
    check_disk,
    fetch,
    partial_files,
    plan_fetch,
)
from ._hub import HfHub, Hub, Listing, Resolved
from ._run import FetchEvents, FetchRun, fetch_repo, plan_line, size_label, spec_model_line
from ._select import (
    RemoteFile,
    ShardSet,
    quant_labels,
    select_files,
    select_quant,
    shard_sets,
    split_name,
)
from ._state import PART_SIZE, Segment, partial_path, plan_segments, state_path
from ._transfer import Events, FileJob, Transfer, TransferOptions
from ._verify import MANIFEST, VerifyItem, VerifyReport, hash_file, verify_dir

__all__ = [
    "MANIFEST",
    "PART_SIZE",
    "DiskSpaceError",
    "Events",
    "FetchError",
    "FetchEvents",
    "FetchFailed",
    "FetchOptions",
    "FetchPlan",
    "FetchResult",
    "FetchRun",
    "FileJob",
    "FileOutcome",
    "HfHub",
    "Hub",
    "HubError",
    "Listing",
    "PlannedFile",
    "RemoteFile",
    "Resolved",
    "Segment",
    "ShardSet",
    "Transfer",
    "TransferOptions",
    "VerifyError",
    "VerifyItem",
    "VerifyReport",
    "check_disk",
    "fetch",
    "fetch_repo",
    "hash_file",
    "partial_files",
    "partial_path",
    "plan_fetch",
    "plan_line",
    "plan_segments",
    "quant_labels",
    "select_files",
    "select_quant",
    "shard_sets",
    "size_label",
    "spec_model_line",
    "split_name",
    "state_path",
    "verify_dir",
]
