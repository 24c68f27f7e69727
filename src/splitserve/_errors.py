"""The one exception tree of splitserve.

Every error a user can cause or meet derives from :class:`SplitserveError`;
its message is one line that says what was wrong, where (file, key, node) and,
where there is one, what to do.  The CLI prints that line and exits non-zero.
Other libraries' errors are converted at the boundary where they occur.

    SplitserveError
    ├── SpecError                a cluster spec that cannot be used (file, key, allowed values)
    ├── UsageError               a bad command-line argument
    │   └── AuthError            an endpoint answered 401: the key is missing or wrong
    ├── EngineError              building, locating, running or asking llama.cpp / vLLM
    │   ├── BuildError           cmake / compiler / source fetch / PR merge failed
    │   ├── EngineUnavailable    (engine._backend) the engine did not answer
    │   ├── EngineHTTPError      (engine._backend) the engine answered with an error status
    │   ├── EngineStreamError    (engine._backend) a started stream broke off or sent a bad event
    │   └── NoReplica            (gateway._router) no replica can take a request now
    ├── ClusterError             starting, stopping or reaching the processes of a cluster
    │   ├── NodeError            one node failed (its name and the cause)
    │   └── NotRunningError      a command that needs a running cluster found none
    ├── ModelError               a model file that cannot be read (path and cause)
    ├── TemplateError            (chat._errors) a chat template that cannot be read or rendered
    │   └── TransplantError      (chat._errors) a recipe block that did not match exactly once
    ├── GrammarError             (chat._grammar) no grammar for this request; a ValueError too
    ├── UnknownFormatError       (chat._registry) a tool-call format name that is not registered
    ├── FetchError               (fetch._errors) a download that failed
    │   ├── HubError             (fetch._errors) the hub refused the request or could not be reached
    │   ├── DiskSpaceError       (fetch._errors) not enough room for the files
    │   ├── VerifyError          (fetch._errors) a file whose size or hash is wrong
    │   └── FetchFailed          (fetch._fetch) files that could not be fetched after retries
    ├── EvalError                (eval._run) an eval that cannot start
    ├── ToolError                (eval._catalog) a bad tool call: the model gets it as the result
    └── APIError                 (gateway._errors) the gateway's error answer: status, OpenAI body

Every exception class with a public name is in this tree (tests/unit/test_errors.py checks the
tree against the classes and their bases). Classes with a private name (``_Retry``,
``_BudgetSpent``, ...) are signals raised and caught inside one module, never errors a caller sees.

Errors of one layer live in that layer; this tree is the map.
"""

from __future__ import annotations


class SplitserveError(Exception):
    """Root of every error splitserve raises on purpose."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def __str__(self) -> str:
        return self.message


class SpecError(SplitserveError):
    """A cluster spec that is malformed or refers to something that is not there."""

    exit_code = 2


class UsageError(SplitserveError):
    """A command-line argument that cannot be used."""

    exit_code = 2


AUTH_FIX = "401 unauthorized: pass --api-key (or set SPLITSERVE_API_KEY)"


class AuthError(UsageError):
    """An endpoint answered 401 (bench, eval, doctor, tune): one line, whatever the step."""

    def __init__(self, where: str = "") -> None:
        super().__init__(f"{where}: {AUTH_FIX}" if where else AUTH_FIX)


class EngineError(SplitserveError):
    """Building, locating or running the llama.cpp engine failed."""


class BuildError(EngineError):
    """The engine build failed: source fetch, PR merge, configure or compile."""


class ClusterError(SplitserveError):
    """Starting, stopping or reaching a cluster's processes failed."""


class NodeError(ClusterError):
    """One node of a cluster failed; the message names the node and the cause."""

    def __init__(self, node: str, cause: str) -> None:
        super().__init__(f"{node}: {cause}")
        self.node = node
        self.cause = cause


class NotRunningError(ClusterError):
    """The command needs a running cluster and there is none."""


class ModelError(SplitserveError):
    """A model file that cannot be read."""


__all__ = [
    "AUTH_FIX",
    "AuthError",
    "BuildError",
    "ClusterError",
    "EngineError",
    "ModelError",
    "NodeError",
    "NotRunningError",
    "SpecError",
    "SplitserveError",
    "UsageError",
]
