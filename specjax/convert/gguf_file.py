"""A GGUF file's metadata and tensor table, parsed in one pass over a memory map.

    f = GGUFFile.open("SmolLM2-135M-Instruct.Q8_0.gguf")
    f.metadata["llama.block_count"]   # 30
    f.tensors[0].name, f.tensors[0].data   # memory-mapped, as `gguf.quants.dequantize` takes it

The layout (llama.cpp's gguf.h, versions 2 and 3): the magic `GGUF`, a uint32 version, uint64
counts of tensors and metadata pairs; each pair is a string key, a uint32 value type and the
value (strings and arrays carry uint64 lengths); each tensor info is a name, its dims (ggml
order: ne0, the contiguous one, first), a uint32 `GGMLQuantizationType` and an offset into the
data section, which starts at the next multiple of `general.alignment` (default 32). A file
written on a big-endian machine is read through its byte order (the version's low half is 0
when read the other way).

Why not `gguf.GGUFReader`: it builds a numpy view for every string of every array before it
returns, which for SmolLM2's 49,152 tokens and 48,900 merges made `load_gguf` take 4.3-4.6 s
(2-core CPU, quiet); with this parser (0.09 s for the file) it takes 2.7 s. The weights are still
dequantized by `gguf.quants.dequantize`, and tests/test_gguf_file.py checks that both readers
see the same metadata and the same tensor bytes.

Any inconsistency (a cut anywhere, a bad magic or version, a length that runs past the end, an
unknown value or tensor type, a duplicated tensor, a bad alignment) raises ValueError saying
what and where; nothing is read beyond the file.
"""

from __future__ import annotations

import dataclasses
import math
import mmap
import os
import struct

import numpy as np
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType

MAGIC = b"GGUF"
VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
# GGUFValueType -> struct format of one scalar, also numpy's type code for arrays of them (8:
# STRING and 9: ARRAY are read by hand).
SCALARS = {
    0: "B",
    1: "b",
    2: "H",
    3: "h",
    4: "I",
    5: "i",
    6: "f",
    7: "?",
    10: "Q",
    11: "q",
    12: "d",
}
STRING, ARRAY = 8, 9
# Tensor types stored as plain numbers (their data is viewed with this dtype, not as bytes).
PLAIN = {
    GGMLQuantizationType.F32: "f4",
    GGMLQuantizationType.F16: "f2",
    GGMLQuantizationType.F64: "f8",
    GGMLQuantizationType.I8: "i1",
    GGMLQuantizationType.I16: "i2",
    GGMLQuantizationType.I32: "i4",
    GGMLQuantizationType.I64: "i8",
}


@dataclasses.dataclass(frozen=True)
class GGUFTensor:
    """One tensor of a file.

    Attributes:
      name: its GGUF name, e.g. "blk.0.attn_q.weight".
      tensor_type: its `GGMLQuantizationType`.
      shape: its dims in ggml order (ne0 first), e.g. (in_features, out_features).
      data: memory-mapped, read-only: for plain types (F32, F16, ...) the numbers as
        shape[::-1]; for block-quantized types the rows' bytes, uint8 [*shape[:0:-1],
        bytes per row]: what `gguf.quants.dequantize` takes.
    """

    name: str
    tensor_type: GGMLQuantizationType
    shape: tuple[int, ...]
    data: np.ndarray


class _Cursor:
    """Reads little- or big-endian values from a buffer, refusing to run past its end."""

    def __init__(self, buf, order: str, start: int = 0):
        self.buf, self.order, self.pos, self.size = buf, order, start, len(buf)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise ValueError(
                f"{what} at byte {self.pos} needs {n} bytes; the file ends at byte {self.size}"
            )

    def scalar(self, fmt: str, what: str):
        n = struct.calcsize(self.order + fmt)
        self.need(n, what)
        (value,) = struct.unpack_from(self.order + fmt, self.buf, self.pos)
        self.pos += n
        return value

    def string(self, what: str) -> str:
        n = self.scalar("Q", what)
        self.need(n, what)
        raw = self.buf[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            where = self.pos - n + e.start
            raise ValueError(f"{what} is not UTF-8 ({e.reason} at byte {where})") from None

    def value(self, vtype: int, what: str):
        if vtype in SCALARS:
            return self.scalar(SCALARS[vtype], what)
        if vtype == STRING:
            return self.string(what)
        if vtype == ARRAY:
            return self.array(what)
        raise ValueError(f"{what} has value type {vtype}, which is not a GGUF type")

    def array(self, what: str) -> list:
        etype = self.scalar("I", what)
        count = self.scalar("Q", what)
        if etype in SCALARS:  # numbers: one view, no loop
            dtype = np.dtype(SCALARS[etype]).newbyteorder(self.order)
            self.need(count * dtype.itemsize, what)
            values = np.frombuffer(self.buf, dtype, count, self.pos)
            self.pos += count * dtype.itemsize
            return values.tolist()
        if etype not in (STRING, ARRAY):
            raise ValueError(f"{what} is an array of type {etype}, which is not a GGUF type")
        self.need(count * 8, what)  # every element holds at least a uint64 length
        return [self.value(etype, what) for _ in range(count)]


@dataclasses.dataclass(frozen=True)
class GGUFFile:
    """A parsed GGUF file: its metadata and its tensors (memory-mapped).

    Attributes:
      path: the file.
      version: 2 or 3.
      metadata: {key: value} in file order: str, int, float, bool or (nested) lists of them.
      tensors: in file order.
      data_offset: where the data section starts (bytes from the start of the file).
      byte_order: "<" (little-endian, what llama.cpp writes by default) or ">" (written for a
        big-endian host: every number, including those inside quantized blocks, byte-swapped).
    """

    path: str
    version: int
    metadata: dict
    tensors: list[GGUFTensor]
    data_offset: int
    byte_order: str = "<"

    @classmethod
    def open(cls, path) -> GGUFFile:
        """Parses `path`; ValueError naming what is wrong if it is not a well-formed GGUF file."""
        path = os.fspath(path)
        with open(path, "rb") as f:
            if os.fstat(f.fileno()).st_size == 0:
                raise ValueError("the file is empty (no GGUF magic)")
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        return _parse(path, buf)


def _parse(path: str, buf) -> GGUFFile:
    head = bytes(buf[:4])
    if head != MAGIC:
        raise ValueError(f"bad magic {head!r} (a GGUF file starts with {MAGIC!r})")
    order = "<"
    cur = _Cursor(buf, order, start=4)
    version = cur.scalar("I", "the version")
    if version & 0xFFFF == 0:  # written on a machine of the other byte order
        order = ">"
        cur = _Cursor(buf, order, start=4)
        version = cur.scalar("I", "the version")
    if version not in VERSIONS:
        raise ValueError(f"GGUF version {version}; specjax reads versions {VERSIONS}")
    n_tensors = cur.scalar("Q", "the tensor count")
    n_pairs = cur.scalar("Q", "the metadata count")
    metadata = {}
    for i in range(n_pairs):
        key = cur.string(f"metadata key {i}")
        vtype = cur.scalar("I", f"metadata field {key!r}")
        metadata[key] = cur.value(vtype, f"metadata field {key!r}")
    infos = []
    for i in range(n_tensors):
        name = cur.string(f"tensor info {i}")
        what = f"tensor {name!r}"
        n_dims = cur.scalar("I", what)
        cur.need(8 * n_dims, what)
        dims = tuple(cur.scalar("Q", what) for _ in range(n_dims))
        raw_type = cur.scalar("I", what)
        offset = cur.scalar("Q", what)
        try:
            qtype = GGMLQuantizationType(raw_type)
        except ValueError:
            raise ValueError(f"{what} has type {raw_type}, which is not a ggml type") from None
        infos.append((name, qtype, dims, offset))
    alignment = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    bad = isinstance(alignment, bool) or not isinstance(alignment, int)
    if bad or alignment <= 0 or alignment & (alignment - 1):
        raise ValueError(f"general.alignment={alignment!r} is not a power of two")
    data_offset = -(-cur.pos // alignment) * alignment
    tensors, seen = [], set()
    for name, qtype, dims, offset in infos:
        if name in seen:
            raise ValueError(f"tensor {name!r} appears twice")
        seen.add(name)
        tensors.append(_tensor(buf, order, data_offset, name, qtype, dims, offset))
    return GGUFFile(path, version, metadata, tensors, data_offset, order)


def _tensor(buf, order, data_offset, name, qtype, dims, offset) -> GGUFTensor:
    """The memory-mapped view of one tensor's data (see GGUFTensor.data)."""
    block, type_size = GGML_QUANT_SIZES[qtype]
    n = math.prod(dims)  # Python ints: corrupt dims cannot wrap around
    row = dims[0] if dims else 1
    if row % block:
        raise ValueError(f"tensor {name!r}: rows of {row} are not whole {qtype.name} blocks")
    n_bytes = n // block * type_size
    start = data_offset + offset
    if start + n_bytes > len(buf):
        raise ValueError(
            f"tensor {name!r} ({n_bytes} bytes at byte {start}) runs past the end of the file "
            f"({len(buf)} bytes)"
        )
    if qtype in PLAIN:
        dtype = np.dtype(PLAIN[qtype]).newbyteorder(order)
        data = np.frombuffer(buf, dtype, n, start).reshape(dims[::-1])
    else:
        shape = (*dims[:0:-1], row // block * type_size)
        data = np.frombuffer(buf, np.uint8, n_bytes, start).reshape(shape)
    return GGUFTensor(name, qtype, dims, data)
