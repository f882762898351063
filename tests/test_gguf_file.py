"""specjax's GGUF parser (`specjax/convert/gguf_file.py`) against llama.cpp's reader and by hand.

* Parity with `gguf.GGUFReader` (an independent implementation of the format, the one llama.cpp
  maintains) on files written by `gguf.GGUFWriter`: the same metadata (values and Python types),
  the same tensors (names, types, dims, data offset and every byte of data, viewed the same way),
  for each weight type the loader supports, and for a big-endian file.
* Exact values from a file whose bytes are written here, field by field from the format's
  description (no gguf package involved): every scalar type, string and numeric arrays, nested
  arrays, the alignment padding and two tensors.
* Damage: the hand-written file cut at every byte, and one corruption of each kind (magic,
  version, a length past the end, unknown value and tensor types, a duplicated tensor, a bad
  alignment, a tensor running past the end, bytes that are not UTF-8): always a ValueError
  that says what, never another exception and never a read past the file.
"""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from specjax.convert.gguf_file import GGUFFile
from tests.gguf_writer import write_tiny_gguf

TYPES = [
    (Q.F32, Q.F32),
    (Q.F16, Q.BF16),
    (Q.Q8_0, Q.Q4_0),
    (Q.Q4_1, Q.Q5_0),
    (Q.Q5_1, Q.Q8_0),
]
K_QUANTS = (Q.Q2_K, Q.Q3_K, Q.Q4_K, Q.Q5_K, Q.Q6_K)  # gguf cannot write these: random bytes


def _assert_same_as_gguf_reader(path):
    ours = GGUFFile.open(path)
    ref = gguf.GGUFReader(path)
    meta = {k: f.contents() for k, f in ref.fields.items() if not k.startswith("GGUF.")}
    assert list(ours.metadata) == list(meta)
    for key, value in meta.items():
        assert ours.metadata[key] == value, key
        assert type(ours.metadata[key]) is type(value), key
        if isinstance(value, list) and value:
            assert type(ours.metadata[key][0]) is type(value[0]), key
    assert ours.version == int(ref.fields["GGUF.version"].contents())
    assert ours.data_offset == ref.data_offset
    assert [t.name for t in ours.tensors] == [t.name for t in ref.tensors]
    for a, b in zip(ours.tensors, ref.tensors, strict=True):
        assert a.tensor_type == b.tensor_type, a.name
        assert a.shape == tuple(b.shape.tolist()), a.name
        assert a.data.shape == b.data.shape and a.data.dtype == b.data.dtype, a.name
        np.testing.assert_array_equal(a.data, b.data, err_msg=a.name)
        assert a.data.tobytes() == b.data.tobytes(), a.name
    return ours


@pytest.mark.parametrize("qtype, embed_qtype", TYPES, ids=[f"{a.name}-{b.name}" for a, b in TYPES])
def test_reads_what_llama_cpps_reader_reads(tmp_path, qtype, embed_qtype):
    path = tmp_path / "tiny.gguf"
    write_tiny_gguf(path, qtype=qtype, embed_qtype=embed_qtype)
    ours = _assert_same_as_gguf_reader(path)
    assert {t.tensor_type for t in ours.tensors} >= {qtype, embed_qtype}
    assert ours.byte_order == "<"


def test_k_quant_tensors_read_as_llama_cpps_reader_reads_them(tmp_path):
    rng = np.random.default_rng(0)
    raw = {}
    for i, q in enumerate(K_QUANTS):
        _, type_size = gguf.GGML_QUANT_SIZES[q]
        rows = 3 + i  # [rows, 2 blocks of 256] as bytes
        raw[f"extra.{q.name}"] = (rng.integers(0, 256, (rows, 2 * type_size), np.uint8), q)
    path = tmp_path / "k.gguf"
    write_tiny_gguf(path, raw_tensors=raw)
    ours = _assert_same_as_gguf_reader(path)
    for t in ours.tensors:
        if t.name in raw:
            assert t.shape == (512, raw[t.name][0].shape[0])
            np.testing.assert_array_equal(t.data, raw[t.name][0])


def test_a_big_endian_file_reads_as_llama_cpps_reader_reads_it(tmp_path):
    path = tmp_path / "big.gguf"
    expected = write_tiny_gguf(path, qtype=Q.F32, embed_qtype=Q.F32, endianess=gguf.GGUFEndian.BIG)
    ours = _assert_same_as_gguf_reader(path)
    assert ours.byte_order == ">"
    norm = next(t for t in ours.tensors if t.name == "output_norm.weight")
    assert norm.data.dtype.byteorder == ">"
    np.testing.assert_array_equal(norm.data, expected["norm.weight"])  # the numbers, not bytes
    assert ours.metadata["llama.block_count"] == 2


# -- a file written by hand ----------------------------------------------------------------------


def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(raw)) + raw


def _pair(key: str, vtype: int, payload: bytes) -> bytes:
    return _s(key) + struct.pack("<I", vtype) + payload


def _hand_written(alignment: int = 64, version: int = 3) -> tuple[bytes, dict]:
    """A GGUF file from the format's description: 12 metadata pairs, two tensors.

    Returns (bytes, {what: byte offset}) with the offsets of the pieces the damage tests hit.
    """
    at = {}
    pairs = [
        _pair("general.architecture", 8, _s("llama")),
        _pair("u8", 0, struct.pack("<B", 250)),
        _pair("i8", 1, struct.pack("<b", -7)),
        _pair("u16", 2, struct.pack("<H", 65000)),
        _pair("i16", 3, struct.pack("<h", -300)),
        _pair("i32", 5, struct.pack("<i", -70000)),
        _pair("f32", 6, struct.pack("<f", 0.1)),
        _pair("flag", 7, struct.pack("<?", True)),
        _pair("u64", 10, struct.pack("<Q", 2**40 + 3)),
        _pair("f64", 12, struct.pack("<d", -2.5)),
        _pair("words", 9, struct.pack("<IQ", 8, 3) + _s("a") + _s("") + _s("é")),
        _pair(
            "nested",
            9,
            struct.pack("<IQ", 9, 2)
            + struct.pack("<IQ", 5, 2)
            + struct.pack("<2i", 1, -2)
            + struct.pack("<IQ", 5, 1)
            + struct.pack("<i", 3),
        ),  # fmt: skip
        _pair("general.alignment", 4, struct.pack("<I", alignment)),
    ]
    body = b"GGUF" + struct.pack("<IQQ", version, 2, len(pairs))
    for p in pairs:
        if p.startswith(_s("words")):
            at["string"] = len(body) + len(_s("words")) + 4 + 12
        body += p
    at["info"] = len(body)
    body += _s("w") + struct.pack("<IQQIQ", 2, 4, 3, int(Q.F32), 0)  # ne0 = 4, ne1 = 3
    at["second"] = len(body)
    body += _s("b") + struct.pack("<IQIQ", 1, 5, int(Q.F16), 64)
    pad = alignment if alignment > 0 and not alignment & (alignment - 1) else 32  # as written
    at["data"] = -(-len(body) // pad) * pad
    body += b"\0" * (at["data"] - len(body))
    body += np.arange(12, dtype="<f4").tobytes() + b"\0" * 16  # 48 bytes, then 16 of padding
    body += np.array([1, -2, 0.5, 4, 8], "<f2").tobytes()
    return body, at


def test_a_hand_written_file_reads_exactly(tmp_path):
    body, at = _hand_written()
    path = tmp_path / "hand.gguf"
    path.write_bytes(body)
    f = GGUFFile.open(path)
    assert f.version == 3 and f.data_offset == at["data"] and f.data_offset % 64 == 0
    assert f.metadata == {
        "general.architecture": "llama",
        "u8": 250,
        "i8": -7,
        "u16": 65000,
        "i16": -300,
        "i32": -70000,
        "f32": float(np.float32(0.1)),
        "flag": True,
        "u64": 2**40 + 3,
        "f64": -2.5,
        "words": ["a", "", "é"],
        "nested": [[1, -2], [3]],
        "general.alignment": 64,
    }
    w, b = f.tensors
    assert (w.name, w.tensor_type, w.shape) == ("w", Q.F32, (4, 3))
    np.testing.assert_array_equal(w.data, np.arange(12, dtype=np.float32).reshape(3, 4))
    assert (b.name, b.tensor_type, b.shape) == ("b", Q.F16, (5,))
    np.testing.assert_array_equal(b.data, np.array([1, -2, 0.5, 4, 8], np.float16))
    assert not w.data.flags.writeable


def test_a_cut_at_any_byte_is_a_value_error(tmp_path):
    body, _ = _hand_written()
    path = tmp_path / "cut.gguf"
    for end in range(len(body)):
        path.write_bytes(body[:end])
        with pytest.raises(ValueError):
            GGUFFile.open(path)
    path.write_bytes(body)
    GGUFFile.open(path)  # the whole file reads


def _patched(body: bytes, offset: int, raw: bytes) -> bytes:
    return body[:offset] + raw + body[offset + len(raw) :]


def _damage():
    body, at = _hand_written()
    yield "magic", b"GGUP" + body[4:], "bad magic"
    yield "version", _patched(body, 4, struct.pack("<I", 7)), "GGUF version 7"
    yield "version 1", _patched(body, 4, struct.pack("<I", 1)), "GGUF version 1"
    yield "long string", _patched(body, at["string"], struct.pack("<Q", 2**62)), "'words'"
    yield "not utf-8", _patched(body, at["string"] + 8, b"\xff"), "not UTF-8"
    key = body.index(_s("u8")) + len(_s("u8"))
    yield "value type", _patched(body, key, struct.pack("<I", 13)), "value type 13"
    words = body.index(_s("words")) + len(_s("words")) + 4
    yield "array type", _patched(body, words, struct.pack("<I", 13)), "array of type 13"
    yield "array count", _patched(body, words + 4, struct.pack("<Q", 2**40)), "'words'"
    tensor_type = at["second"] + len(_s("b")) + 4 + 8
    yield "tensor type", _patched(body, tensor_type, struct.pack("<I", 99)), "type 99"
    yield "duplicate", _patched(body, at["second"] + 8, b"w"), "'w' appears twice"
    offset = tensor_type + 4
    yield "past the end", _patched(body, offset, struct.pack("<Q", 4096)), "past the end"
    dims = at["info"] + len(_s("w")) + 4
    yield "huge dims", _patched(body, dims, struct.pack("<QQ", 2**62, 2**62)), "past the end"
    block = _patched(body, dims + 16, struct.pack("<I", int(Q.Q8_0)))
    yield "partial block", block, "not whole Q8_0 blocks"
    odd, _ = _hand_written(alignment=48)
    yield "alignment", odd, "general.alignment=48"
    zero, _ = _hand_written(alignment=0)
    yield "zero alignment", zero, "general.alignment=0"
    old = _pair("general.alignment", 4, struct.pack("<I", 64))
    as_bool = body.replace(old, _pair("general.alignment", 7, struct.pack("<?", True)))
    yield "bool alignment", as_bool, "general.alignment=True"


DAMAGE = list(_damage())


@pytest.mark.parametrize("body, message", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_damage_is_a_value_error_saying_what(tmp_path, body, message):
    path = tmp_path / "bad.gguf"
    path.write_bytes(body)
    with pytest.raises(ValueError) as info:
        GGUFFile.open(path)
    assert message in str(info.value), str(info.value)


def test_the_damage_cases_damage_a_file_that_reads():
    # A damage test that an intact file would also fail is no test: the base file reads.
    body, at = _hand_written()
    for name, damaged, _ in DAMAGE:
        assert damaged != body, name
    assert len(DAMAGE) == 16 and at["data"] > 0


def test_an_empty_file_says_so(tmp_path):
    path = tmp_path / "empty.gguf"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match="empty"):
        GGUFFile.open(path)


@pytest.mark.long
def test_smollm2_reads_as_llama_cpps_reader_reads_it():
    # The real file (49,152 tokens, 48,900 merges, 272 tensors in F32, Q8_0 and Q4_1): about 3 s,
    # nearly all of it gguf.GGUFReader's, so not in CI (run with --long).
    from specjax.pretrained import fetch

    ours = _assert_same_as_gguf_reader(fetch("smollm2-135m-instruct"))
    assert len(ours.tensors) == 272 and len(ours.metadata["tokenizer.ggml.tokens"]) == 49152
