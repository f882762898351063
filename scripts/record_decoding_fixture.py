"""Records what every decoder generates for fixed keys, as a bit-identity fixture.

The output `tests/data/decoding_fixture.json` was written by this script at commit 7a9733c,
before the decoding core was restructured (issue #13); `tests/test_decoding_fixture.py` checks
that today's decoders still produce exactly those tokens and statistics. Re-record only when a
change is *meant* to alter outputs (say so in the commit):

    python scripts/record_decoding_fixture.py --out=tests/data/decoding_fixture.json

The cases use the public API only (`generate` with the constructor and keywords people use), so
the same script runs against the code before and after a refactor.
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests"))

import jax  # noqa: E402
import numpy as np  # noqa: E402

import specjax  # noqa: E402,F401  (configures XLA:CPU where that is still done on import)
from specjax.decoding import make_warper  # noqa: E402

CASES = (
    # (name, draft or None for autoregressive, warper name, target name)
    ("ar_greedy", None, "greedy", "gpt2"),
    ("ar_sample", None, "sample", "gpt2"),
    ("ar_chain", None, "chain", "gpt2"),
    ("ar_llama_sample", None, "sample", "llama"),
    ("spec_noisy_self_greedy", "noisy_self", "greedy", "gpt2"),
    ("spec_noisy_self_sample", "noisy_self", "sample", "gpt2"),
    ("spec_transformer_sample", "transformer", "sample", "gpt2"),
    ("spec_transformer_chain", "transformer", "chain", "gpt2"),
    ("spec_bigram_sample", "bigram", "sample", "gpt2"),
    ("spec_uniform_sample", "uniform", "sample", "gpt2"),
    ("spec_prompt_lookup_sample", "prompt_lookup", "sample", "gpt2"),
    ("spec_prompt_lookup_greedy", "prompt_lookup", "greedy", "gpt2"),
    ("spec_llama_self_sample", "llama_noisy", "sample", "llama"),
)
SEED = 1234


def warpers():
    return {
        "greedy": make_warper(0.0),
        "sample": make_warper(1.0),
        "chain": make_warper(temperature=0.8, top_k=20, top_p=0.9),
    }


def run_case(name, draft_name, warper_name, target_name) -> dict:
    """Generates MAX_NEW tokens for the shared ragged prompts; returns tokens and counters."""
    import decoding_setup as ds

    warper = warpers()[warper_name]
    target, tparams = (
        (ds.TARGET, ds.target_params())
        if target_name == "gpt2"
        else (ds.LLAMA_TARGET, ds.llama_params())
    )
    key = jax.random.PRNGKey(SEED)
    if draft_name is None:
        result = ds.ar_decoder(warper, target=target).generate(
            tparams, list(ds.PROMPTS), key, ds.MAX_NEW
        )
    else:
        if draft_name == "llama_noisy":
            draft, dparams = ds.LLAMA_TARGET, ds.perturbed(ds.llama_params(), seed=5, scale=0.03)
        else:
            draft, dparams = ds.drafts()[draft_name]
        result = ds.spec_decoder(draft, warper, target=target).generate(
            tparams, dparams, list(ds.PROMPTS), key, ds.MAX_NEW
        )
    stats = jax.device_get(result.stats)
    return {
        "tokens": [row.tolist() for row in result.new_tokens()],
        "target_calls": int(stats.target_calls),
        "draft_calls": int(stats.draft_calls),
        "emitted": np.asarray(stats.emitted).tolist(),
        "iterations": np.asarray(stats.iterations).tolist(),
        "accepted_at": np.asarray(stats.accepted_at).tolist(),
    }


def main(argv):
    out = "tests/data/decoding_fixture.json"
    for arg in argv[1:]:
        if arg.startswith("--out="):
            out = arg.split("=", 1)[1]
    record = {name: run_case(name, *rest) for name, *rest in CASES}
    with open(out, "w", encoding="utf-8") as f:  # one case per line: readable diffs
        lines = [f"{json.dumps(name)}: {json.dumps(case)}" for name, case in record.items()]
        f.write("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"wrote {len(record)} cases to {out}")


if __name__ == "__main__":
    main(sys.argv)
