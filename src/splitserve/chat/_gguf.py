"""Reading the chat templates embedded in a GGUF file's header (never its tensor data).

``tokenizer.chat_template`` holds the default template; ``tokenizer.chat_template.<name>``
the named alternates (``tool_use``, ``rag``, ...). The key/value section is walked with the
``gguf`` package's type codes, skipping every other value (the vocabulary arrays are large)
without decoding it: ``gguf.GGUFReader`` maps and indexes the whole file, which takes tens
of seconds on a small model; this reads only the header, in well under a second. This is
the one function of the chat layer that opens a file.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

from gguf import GGUF_MAGIC, GGUFValueType, Keys

from ._errors import TemplateError

_SCALAR = {
    GGUFValueType.UINT8: 1, GGUFValueType.INT8: 1, GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2, GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4, GGUFValueType.INT32: 4, GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8, GGUFValueType.INT64: 8, GGUFValueType.FLOAT64: 8,
}
_PREFIX = Keys.Tokenizer.CHAT_TEMPLATE  # "tokenizer.chat_template"


class _Header:
    def __init__(self, f: BinaryIO, path: Path) -> None:
        self.f = f
        self.path = path

    def read(self, n: int) -> bytes:
        data = self.f.read(n)
        if len(data) != n:
            raise TemplateError(f"{self.path}: the GGUF header ends early; the file is "
                                "truncated or not a GGUF")
        return data

    def u32(self) -> int:
        return int(struct.unpack("<I", self.read(4))[0])

    def u64(self) -> int:
        return int(struct.unpack("<Q", self.read(8))[0])

    def string(self) -> bytes:
        return self.read(self.u64())

    def skip_string(self) -> None:
        self.f.seek(self.u64(), 1)

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALAR:
            self.f.seek(_SCALAR[GGUFValueType(vtype)], 1)
        elif vtype == GGUFValueType.STRING:
            self.skip_string()
        elif vtype == GGUFValueType.ARRAY:
            itype, count = self.u32(), self.u64()
            if itype in _SCALAR:
                self.f.seek(_SCALAR[GGUFValueType(itype)] * count, 1)
            else:
                for _ in range(count):
                    self.skip_value(itype)
        else:
            raise TemplateError(f"{self.path}: unknown GGUF value type {vtype}; "
                                "the file is damaged or newer than this reader")


def read_chat_templates(path: str | Path) -> dict[str, str]:
    """The chat templates in a GGUF header: ``{"default": ..., "<name>": ...}`` (may be empty)."""
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as exc:
        raise TemplateError(f"{p}: cannot open: {exc.strerror}") from None
    with f:
        h = _Header(f, p)
        magic = struct.unpack("<I", h.read(4))[0]
        if magic != GGUF_MAGIC:
            raise TemplateError(f"{p}: not a GGUF file (bad magic); pass a .gguf model")
        version = h.u32()
        if version == 1:
            h.u32()
            kv_count = h.u32()
        else:
            h.u64()
            kv_count = h.u64()
        found: dict[str, str] = {}
        for _ in range(kv_count):
            key = h.string().decode("utf-8", "replace")
            vtype = h.u32()
            if vtype == GGUFValueType.STRING and (key == _PREFIX or key.startswith(_PREFIX + ".")):
                text = h.string().decode("utf-8", "replace")
                found["default" if key == _PREFIX else key[len(_PREFIX) + 1:]] = text
            else:
                h.skip_value(vtype)
    return found
