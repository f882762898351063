"""`Pipeline.from_pretrained` on local Hugging Face directories (GPT-2 layout), without torch.

The checkpoints are written here: config.json, model.safetensors of random numpy tensors under
GPT-2's names, and a word-level tokenizer.json. Needs `safetensors` and `tokenizers` (the `[hf]`
extra); skipped without them.
"""

import json

import jax
import numpy as np
import pytest

safetensors_numpy = pytest.importorskip("safetensors.numpy")
tokenizers = pytest.importorskip("tokenizers")

import specjax  # noqa: E402
from specjax.convert import HFTokenizer, load_hf_pair  # noqa: E402
from specjax.decoding import SpeculativeDecoder, make_warper  # noqa: E402

WORDS = ["<s>", "<unk>", "</s>"] + "the cat sat on a mat and dog ran far away".split()
EMBED, POSITIONS = 16, 64


def _gpt2_dir(path, layers: int, seed: int, words=WORDS) -> str:
    """A GPT-2 checkpoint directory with N(0, 0.5²) weights (peaked next-token choices)."""
    rng = np.random.default_rng(seed)
    d, v = EMBED, len(words)

    def w(*shape):
        return (0.5 * rng.standard_normal(shape)).astype(np.float32)

    tensors = {"wte.weight": w(v, d), "wpe.weight": w(POSITIONS, d)}
    tensors |= {"ln_f.weight": 1 + w(d), "ln_f.bias": w(d)}
    for i in range(layers):
        p = f"h.{i}."
        tensors |= {
            p + "ln_1.weight": 1 + w(d),
            p + "ln_1.bias": w(d),
            p + "attn.c_attn.weight": w(d, 3 * d),
            p + "attn.c_attn.bias": w(3 * d),
            p + "attn.c_proj.weight": w(d, d),
            p + "attn.c_proj.bias": w(d),
            p + "ln_2.weight": 1 + w(d),
            p + "ln_2.bias": w(d),
            p + "mlp.c_fc.weight": w(d, 4 * d),
            p + "mlp.c_fc.bias": w(4 * d),
            p + "mlp.c_proj.weight": w(4 * d, d),
            p + "mlp.c_proj.bias": w(d),
        }
    path.mkdir()
    safetensors_numpy.save_file(tensors, str(path / "model.safetensors"))
    config = {
        "model_type": "gpt2",
        "vocab_size": v,
        "n_positions": POSITIONS,
        "n_embd": d,
        "n_layer": layers,
        "n_head": 2,
        "bos_token_id": 0,
        "eos_token_id": 2,
    }
    (path / "config.json").write_text(json.dumps(config))
    tok = tokenizers.Tokenizer(
        tokenizers.models.WordLevel({t: i for i, t in enumerate(words)}, unk_token="<unk>")
    )
    tok.pre_tokenizer = tokenizers.pre_tokenizers.Whitespace()
    tok.save(str(path / "tokenizer.json"))
    # The special tokens by name: without them transformers (5.x) adds its own <|endoftext|>,
    # an id the 14-row output layer does not have.
    special = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    (path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", **special})
    )
    return str(path)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    return _gpt2_dir(root / "target", 2, 0), _gpt2_dir(root / "draft", 1, 1)


def test_hf_pair_text_equals_the_decoders_own_output(dirs):
    pipe = specjax.Pipeline.from_pretrained(target=dirs[0], draft=dirs[1])
    assert isinstance(pipe.tokenizer, HFTokenizer) and pipe.add_bos and pipe.eos_id == 2
    prompts = ["the cat sat", "a dog ran"]
    out = pipe.generate(prompts, max_new_tokens=8, gamma=3)

    pair = load_hf_pair(*dirs)
    decoder = SpeculativeDecoder(pair.target, pair.draft, 3, make_warper(0.0), cache_len=64)
    ids = [pair.tokenizer.encode(p, add_bos=True) for p in prompts]
    result = decoder.generate(
        pair.target_params, pair.draft_params, ids, jax.random.PRNGKey(0), 8, eos_id=2
    )
    expected = [pair.tokenizer.decode(r, stop_at_eos=True) for r in result.new_tokens()]
    assert out.text == expected and any(out.text)
    streamed = [
        "".join(s[b] for s in pipe.stream(prompts, max_new_tokens=8, gamma=3)) for b in (0, 1)
    ]
    assert streamed == out.text


def test_hf_tokenizer_mismatch_is_explained(dirs, tmp_path):
    other = _gpt2_dir(tmp_path / "other", 1, 2, words=WORDS[:3] + [w + "x" for w in WORDS[3:]])
    with pytest.raises(ValueError, match="tokenizer mismatch"):
        specjax.Pipeline.from_pretrained(target=dirs[0], draft=other)
