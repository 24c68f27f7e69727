"""Reading the chat templates embedded in a GGUF file's header (never its tensor data).

``tokenizer.chat_template`` holds the default template; ``tokenizer.chat_template.<name>``
the named alternates (``tool_use``, ``rag``, ...). The key/value section is walked with the
``gguf`` package's type codes, skipping every other value (the vocabulary arrays are large)
without decoding it, through a memory map, so only the header's pages are read:
``gguf.GGUFReader`` indexes the whole file, which takes 10-40 s on the small test models;
this takes a fraction of a second. This is
the one function of the chat layer that opens a file.
"""

from __future__ import annotations

import mmap
import struct
from pathlib import Path

from gguf import GGUF_MAGIC, GGUFValueType, Keys

from ._errors import TemplateError

_SCALAR = {
    GGUFValueType.UINT8: 1,
    GGUFValueType.INT8: 1,
    GGUFValueType.BOOL: 1,
    GGUFValueType.UINT16: 2,
    GGUFValueType.INT16: 2,
    GGUFValueType.UINT32: 4,
    GGUFValueType.INT32: 4,
    GGUFValueType.FLOAT32: 4,
    GGUFValueType.UINT64: 8,
    GGUFValueType.INT64: 8,
    GGUFValueType.FLOAT64: 8,
}
_PREFIX = Keys.Tokenizer.CHAT_TEMPLATE  # "tokenizer.chat_template"
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


class _Header:
    """A cursor over the memory-mapped file: only the pages it reads are ever loaded."""

    def __init__(self, data: mmap.mmap, path: Path) -> None:
        self.data = data
        self.pos = 0
        self.path = path

    def _need(self, n: int) -> None:
        if self.pos + n > len(self.data):
            raise TemplateError(f"{self.path}: the GGUF header ends early; the file is truncated or not a GGUF")

    def u32(self) -> int:
        self._need(4)
        value = int(_U32.unpack_from(self.data, self.pos)[0])
        self.pos += 4
        return value

    def u64(self) -> int:
        self._need(8)
        value = int(_U64.unpack_from(self.data, self.pos)[0])
        self.pos += 8
        return value

    def string(self) -> bytes:
        n = self.u64()
        self._need(n)
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def skip_value(self, vtype: int) -> None:
        if vtype in _SCALAR:
            self._need(_SCALAR[GGUFValueType(vtype)])
            self.pos += _SCALAR[GGUFValueType(vtype)]
        elif vtype == GGUFValueType.STRING:
            n = self.u64()  # (not `self.pos += self.u64()`: that adds to the old position)
            self.pos += n
        elif vtype == GGUFValueType.ARRAY:
            itype, count = self.u32(), self.u64()
            if itype in _SCALAR:
                self.pos += _SCALAR[GGUFValueType(itype)] * count
            elif itype == GGUFValueType.STRING:
                data, pos, unpack = self.data, self.pos, _U64.unpack_from
                for _ in range(count):  # the vocabulary: hundreds of thousands of strings
                    pos += 8 + unpack(data, pos)[0]
                self.pos = pos
                self._need(0)
            else:
                for _ in range(count):
                    self.skip_value(itype)
        else:
            raise TemplateError(
                f"{self.path}: unknown GGUF value type {vtype}; the file is damaged or newer than this reader"
            )


def read_chat_templates(path: str | Path) -> dict[str, str]:
    """The chat templates in a GGUF header: ``{"default": ..., "<name>": ...}`` (may be empty)."""
    p = Path(path)
    try:
        f = p.open("rb")
    except OSError as exc:
        raise TemplateError(f"{p}: cannot open: {exc.strerror}") from None
    with f:
        try:
            data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # an empty file cannot be mapped
            raise TemplateError(f"{p}: not a GGUF file (empty); pass a .gguf model") from None
        with data:
            try:
                return _read(_Header(data, p))
            except struct.error:
                raise TemplateError(f"{p}: the GGUF header ends early; the file is truncated or not a GGUF") from None


def _read(h: _Header) -> dict[str, str]:
    if h.u32() != GGUF_MAGIC:
        raise TemplateError(f"{h.path}: not a GGUF file (bad magic); pass a .gguf model")
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
            found["default" if key == _PREFIX else key[len(_PREFIX) + 1 :]] = text
        else:
            h.skip_value(vtype)
    return found
