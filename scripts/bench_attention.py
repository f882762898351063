"""Attention implementations side by side: decode cost against cache_len, and T(k) (issue #20).

    python scripts/bench_attention.py                            # mini + zoo target shapes
    python scripts/bench_attention.py --models=zoo,85m --repeats=7 --json=/tmp/attn.json

For each model: greedy autoregressive ms/token after a --prompt_len-token prompt at each of
--cache_lens, per --impls entry ("blockwise@256": block 256), every call interleaved in one
round (`specjax.benchmark.attention.cache_len_scaling`), then the verification curve T(k) at
cache 1024 (`verification_curve`). Models: "mini" (the trained mini target, learned positions up
to 256: only --cache_lens <= 256 are run on its weights), "mini4k" (its shape, max_len 4096,
random weights), "zoo" (the zoo target's shape, 10.8M, random weights), "85m" (d=768, 12 layers,
85.6M, random weights). Prints markdown tables with the load average before and after.
"""

from __future__ import annotations

import argparse
import json
import os

import specjax

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

from specjax.benchmark.attention import cache_len_scaling, verification_curve  # noqa: E402
from specjax.models import TransformerConfig  # noqa: E402
from specjax.training.zoo import cache_root, size_fields  # noqa: E402

VOCAB = 259  # the byte tokenizer's vocabulary (as the trained mini models)
MINI = "mini_target-python-b1c5c50bde14"


def model(name: str):
    """(config, params or None for random) of a named model."""
    if name == "mini":
        from specjax.checkpoint import load_model

        lm, params, _ = load_model(os.path.join(cache_root(), MINI))
        return lm.config, params
    if name == "mini4k":
        fields = dict(num_layers=4, num_heads=4, embed_dim=128, mlp_dim=512)
    elif name == "zoo":
        fields = size_fields("target")
    elif name == "85m":
        fields = dict(num_layers=12, num_heads=12, embed_dim=768, mlp_dim=3072)
    else:
        raise ValueError(f"--models: unknown model {name!r} (mini, mini4k, zoo, 85m)")
    return TransformerConfig.gpt2(VOCAB, max_len=4096, **fields), None


def table(result: dict, clock: str) -> str:
    r = result[clock]
    lens = sorted(next(iter(r["ms_per_token"].values())))
    lines = [
        f"| impl ({clock}) | "
        + " | ".join(f"cache {c}" for c in lens)
        + f" | {lens[-1]}/{lens[0]} |",
        "|---" * (len(lens) + 2) + "|",
    ]
    for impl, ms in r["ms_per_token"].items():
        vs = r.get("vs_xla", {}).get(impl, {})
        cells = [
            f"{ms[c]:.2f}" + (f" ({vs[c]:.2f}×)" if vs and impl != "xla" else "") for c in lens
        ]
        lines.append(f"| {impl} | " + " | ".join(cells) + f" | {r['ratio'][impl]:.2f} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="mini,mini4k,zoo")
    parser.add_argument("--impls", default="xla,blockwise,blockwise@256")
    parser.add_argument("--cache_lens", default="256,1024,4096")
    parser.add_argument("--prompt_len", type=int, default=128)
    parser.add_argument("--new_tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ks", default="1,4,16,64", help="T(k) curve ('' skips it)")
    parser.add_argument("--json", default="", help="write every figure here")
    args = parser.parse_args()
    impls = args.impls.split(",")
    out = {"args": vars(args), "load_before": os.getloadavg(), "models": {}}
    print(f"load average before: {out['load_before']}")
    for name in args.models.split(","):
        cfg, params = model(name)
        lens = [int(c) for c in args.cache_lens.split(",")]
        if name == "mini":
            lens = [c for c in lens if c <= cfg.max_len]
        res = cache_len_scaling(
            cfg, impls, lens, args.prompt_len, args.new_tokens, args.repeats, params=params
        )
        print(f"\n### {name}: {cfg.num_params() / 1e6:.2f}M params, ms/token (vs xla)\n")
        for clock in ("wall", "cpu", "wall_min", "cpu_min"):
            print(table(res, clock), "\n")
        entry = {"scaling": res}
        if args.ks:
            ks = [int(k) for k in args.ks.split(",")]
            curve = verification_curve(
                cfg, impls, ks, args.prompt_len, min(1024, cfg.max_len), args.repeats, params
            )
            print(f"\nT(k) ms at cache {min(1024, cfg.max_len)} after {args.prompt_len} tokens:")
            print("| impl | " + " | ".join(f"k={k}" for k in ks) + " |")
            print("|---" * (len(ks) + 1) + "|")
            for impl, per in curve.items():
                print(f"| {impl} | " + " | ".join(f"{per[k]:.2f}" for k in ks) + " |")
            entry["verification"] = curve
        out["models"][name] = entry
        print(f"load average: {os.getloadavg()}", flush=True)
    out["load_after"] = os.getloadavg()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
