"""The SSH node under the names the cluster's modules import: :class:`SshNode` and its log
helpers live at the root (:mod:`splitserve._ssh`), beside :class:`~splitserve._node.LocalNode`."""

from __future__ import annotations

from .._node import remote_env, sh_path
from .._ssh import EXIT_MARK, SshNode, exit_status_from_log

__all__ = ["EXIT_MARK", "SshNode", "exit_status_from_log", "remote_env", "sh_path"]
