"""Errors of the chat layer (all :class:`splitserve.SplitserveError`; never for model output).

SplitserveError
├── TemplateError        a chat template that cannot be read, compiled or rendered
│   └── TransplantError  a recipe block that does not match exactly once, a bad recipe
└── UnknownFormatError   (in _registry) a tool-call format name that is not registered
"""

from __future__ import annotations

from .._errors import SplitserveError


class TemplateError(SplitserveError):
    """A chat template (or the file holding it) that cannot be used."""


class TransplantError(TemplateError):
    """A transplant recipe that does not apply: the message names the block and the file."""
