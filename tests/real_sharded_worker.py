"""SmolLM2-135M-Instruct through ShardedDecoder on fake CPU devices; writes results as JSON.

Run by tests/test_real_model_sharded.py in a fresh process (the device count is fixed when JAX
starts):

    python tests/real_sharded_worker.py --devices 8 --out result.json

For each mesh (data x model) it decodes the same chat prompts greedily, autoregressively and
speculatively (prompt lookup, γ = 4), and records the tokens with those of the unsharded
decoders, the parameter shardings of attention and MLP weights, and the top-2 logit gap of the
unsharded greedy run at every position (a near-tie may flip under another summation order).
"""

import argparse
import json
import os
import sys

ARGS = None


def _parse():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--devices", type=int, default=8, help="fake CPU devices")
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--max_new_tokens", type=int, default=16)
    return parser.parse_args()


if __name__ == "__main__":
    ARGS = _parse()
    os.environ["XLA_FLAGS"] = (
        os.environ.get("XLA_FLAGS", "") + f" --xla_force_host_platform_device_count={ARGS.devices}"
    )
    import specjax

    specjax.configure_cpu()  # the KV caches updated in place, as in the tests' own process

import gc_setting  # noqa: E402
import jax  # noqa: E402
import numpy as np  # noqa: E402

from specjax import sharding as sh  # noqa: E402
from specjax.convert import load_gguf  # noqa: E402
from specjax.decoding import (  # noqa: E402
    AutoregressiveDecoder,
    LookupDrafter,
    ShardedDecoder,
    SpeculativeDecoder,
    make_warper,
)
from specjax.pretrained import fetch  # noqa: E402

# The test session's cycle-collector threshold: this process compiles many programs and holds
# their objects (test_sharding 39.8 -> 35.9 s with it).
gc_setting.apply()

PROMPTS = (
    "Name three primary colours.",
    "Translate into French: The cat sleeps on the warm windowsill.",
    "Write a Python function that returns the square of a number.",
    "Tom has 5 apples and buys 7 more. How many apples does he have now?",
    "Continue the story: The lighthouse keeper opened the door and saw",
    "Summarise in one sentence: Bees carry pollen between flowers, which helps plants grow fruit.",
    "Read: 'Mia left at noon and arrived at three.' How long was her trip?",
    "Write a haiku about rain.",
)  # 8 rows: divisible by every data axis below
MESHES = ((8, 1), (2, 4), (1, 8), (2, 3))  # (data, model); (2, 3) uses 6 of the 8 devices
CACHE_LEN = 160


def _spec_of(shardings, path):
    node = shardings
    for key in path:
        node = node[key]
    return str(node.spec)


def main():
    model, params, tok = load_gguf(fetch("smollm2-135m-instruct"), matmul="xla")
    prompts = [
        np.asarray(tok.apply_chat_template([{"role": "user", "content": p}]), np.int32)
        for p in PROMPTS
    ]
    warper = make_warper(0.0)
    key = jax.random.PRNGKey(0)
    ar = AutoregressiveDecoder(model, warper, CACHE_LEN)
    drafter = LookupDrafter(model.vocab_size, max_ngram=3)
    spec = SpeculativeDecoder(model, drafter, gamma=4, warper=warper, cache_len=CACHE_LEN)
    out = {"devices": jax.device_count(), "meshes": {}}
    reference = ar.generate(params, prompts, key, ARGS.max_new_tokens)
    out["reference"] = np.asarray(reference.tokens).tolist()
    out["reference_num_new"] = np.asarray(reference.lengths).tolist()
    spec_reference = spec.generate(params, {}, prompts, key, ARGS.max_new_tokens)
    out["spec_reference"] = np.asarray(spec_reference.tokens).tolist()
    for data, width in MESHES:
        devices = np.asarray(jax.devices()[: data * width])
        mesh = sh.make_mesh((data, width), devices=devices)
        row = {}
        for name, decoder in (("ar", ar), ("spec", spec)):
            sharded = ShardedDecoder(decoder, mesh)
            placed = sharded.shard_params(params, *([{}] if name == "spec" else []))
            result = sharded.generate(
                *placed, prompts=prompts, key=key, max_new_tokens=ARGS.max_new_tokens
            )
            row[name] = np.asarray(result.tokens).tolist()
            row[name + "_num_new"] = np.asarray(result.lengths).tolist()
        shardings = ShardedDecoder(ar, mesh).param_shardings(params)[0]
        row["shardings"] = {
            "/".join(path): _spec_of(shardings, path)
            for path in (
                ("block_0", "attn", "query", "kernel"),
                ("block_0", "attn", "key", "kernel"),
                ("block_0", "mlp", "up", "kernel"),
            )
            if _has(shardings, path)
        }
        out["meshes"][f"{data}x{width}"] = row
    with open(ARGS.out, "w", encoding="utf-8") as f:
        json.dump(out, f)


def _has(tree, path):
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return False
        tree = tree[key]
    return True


if __name__ == "__main__":
    sys.exit(main())
