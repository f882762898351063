"""Tests for specjax.data.tokenizer: exact ids, round trips, specials, padding."""

import numpy as np
import pytest

from specjax.data import tokenizer as tok

T = tok.ByteTokenizer()


def test_constants_and_properties():
    assert (tok.PAD_ID, tok.BOS_ID, tok.EOS_ID, tok.VOCAB_SIZE) == (256, 257, 258, 259)
    assert (T.pad_id, T.bos_id, T.eos_id, T.vocab_size) == (256, 257, 258, 259)
    # Frozen and hashable: usable as a static jit argument.
    assert hash(T) == hash(tok.ByteTokenizer()) and T == tok.ByteTokenizer()


def test_encode_exact_ids():
    np.testing.assert_array_equal(T.encode("Ab\n"), [65, 98, 10])
    # "é" is U+00E9 -> UTF-8 C3 A9; "€" is U+20AC -> E2 82 AC; "𝄞" U+1D11E -> F0 9D 84 9E.
    np.testing.assert_array_equal(
        T.encode("é€𝄞"), [0xC3, 0xA9, 0xE2, 0x82, 0xAC, 0xF0, 0x9D, 0x84, 0x9E]
    )
    ids = T.encode("hi", add_bos=True, add_eos=True)
    np.testing.assert_array_equal(ids, [257, 104, 105, 258])
    assert ids.dtype == np.int32
    assert T.encode("").shape == (0,) and T.encode("").dtype == np.int32
    np.testing.assert_array_equal(T.encode_bytes(b"\xff\x00", add_bos=True), [257, 255, 0])


def test_round_trip_non_ascii_text():
    texts = [
        "",
        "plain ascii\twith\ttabs\r\n",
        "Größe, naïve café — “quotes”",
        "日本語のテキスト、中文，한국어",
        "emoji 👩‍🔬🇺🇳 and combining e\u0301",
        "\x00nul and \x7f del",
    ]
    for text in texts:
        assert T.decode(T.encode(text)) == text
        assert T.decode(T.encode(text, add_bos=True, add_eos=True)) == text


def test_round_trip_random_code_points():
    # Random strings over all Unicode scalar values (surrogates D800..DFFF are not scalars).
    rng = np.random.default_rng(0)
    for _ in range(300):
        n = int(rng.integers(0, 40))
        cps = rng.integers(0, 0x110000 - 0x800, size=n)
        cps = np.where(cps >= 0xD800, cps + 0x800, cps)  # skip the surrogate block
        text = "".join(map(chr, cps))
        ids = T.encode(text)
        assert ids.size == len(text.encode("utf-8"))
        assert T.decode(ids) == text


def test_lone_surrogate_is_rejected():
    with pytest.raises(ValueError, match="position 2"):
        T.encode("ab\ud800c")


def test_decode_skips_specials_and_stops_at_eos():
    ids = [257, 104, 256, 105, 258, 33, 256]
    assert T.decode(ids) == "hi!"
    assert T.decode(ids, stop_at_eos=True) == "hi"
    assert T.decode(np.array([], np.int32)) == ""


def test_decode_invalid_utf8_uses_replacement_char():
    # A lone continuation byte and a truncated 3-byte sequence each become one U+FFFD.
    assert T.decode([0x61, 0x80, 0x62]) == "a\ufffdb"
    assert T.decode([0xE2, 0x82]) == "\ufffd"


def test_decode_rejects_bad_ids():
    with pytest.raises(ValueError, match=r"\[0, 259\)"):
        T.decode([1, 259])
    with pytest.raises(ValueError, match=r"\[0, 259\)"):
        T.decode([-1])
    with pytest.raises(TypeError, match="integers"):
        T.decode(np.array([1.0, 2.0]))
    with pytest.raises(ValueError, match="1-D"):
        T.decode(np.zeros((2, 2), np.int32))
    with pytest.raises(TypeError, match="str"):
        T.encode(b"bytes")


def test_pad_batch_right_and_left():
    ids, lengths = tok.pad_batch([[1, 2, 3], [4], []], length=4)
    np.testing.assert_array_equal(ids, [[1, 2, 3, 256], [4, 256, 256, 256], [256] * 4])
    np.testing.assert_array_equal(lengths, [3, 1, 0])
    assert ids.dtype == np.int32 and lengths.dtype == np.int32
    ids, _ = tok.pad_batch([[1, 2, 3], [4]], pad_left=True)
    np.testing.assert_array_equal(ids, [[1, 2, 3], [256, 256, 4]])
    with pytest.raises(ValueError, match=r"sequences\[1\] has 3 tokens"):
        tok.pad_batch([[1], [1, 2, 3]], length=2)


def test_encode_batch_and_decode_batch_round_trip():
    texts = ["ab", "ü", ""]
    ids, lengths = T.encode_batch(texts, add_bos=True)
    np.testing.assert_array_equal(ids, [[257, 97, 98], [257, 0xC3, 0xBC], [257, 256, 256]])
    np.testing.assert_array_equal(lengths, [3, 3, 1])
    assert T.decode_batch(ids, lengths) == texts
    left, _ = T.encode_batch(texts, length=4, pad_left=True)
    assert left.shape == (3, 4) and T.decode_batch(left) == texts
    with pytest.raises(TypeError, match="single str"):
        T.encode_batch("abc")
