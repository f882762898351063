"""Prints the model zoo of a corpus and the acceptance rate alpha of every draft for its target.

    python scripts/zoo_alpha.py --corpus=python --json_out=runs/zoo-python.json

Rows: each trained model's parameters, tokens seen, training time and validation bits/byte
(from its export's metadata); then alpha at temperature 0 (greedy) and 1 of each draft
(draft_l/m/s, any distilled draft -- from scratch or fine-tuned from the data-trained one --,
bigram, unigram) for the target, on the validation
split's fixed windows. Models that are not trained yet are listed with the command to train
them. Takes a few minutes on a 2-core CPU (one target forward over the split, plus each draft's).
"""

from __future__ import annotations

import json
import os
import sys

from absl import app, flags, logging

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402
from experiments import zoo  # noqa: E402
from specjax.alpha import alpha_table  # noqa: E402
from specjax.benchmark.script_checks import prepare_output  # noqa: E402
from specjax.checkpoint import model_config_from_dict  # noqa: E402
from specjax.data.corpora import load_corpus  # noqa: E402

_CORPUS = flags.DEFINE_string("corpus", "python", "python | shakespeare")
_TARGET = flags.DEFINE_string("target", "target", "size of the target")
_MAX_WINDOWS = flags.DEFINE_integer(
    "max_windows", 512, "validation windows (evenly spread) for alpha; 0 = all"
)
_JSON_OUT = flags.DEFINE_string("json_out", "", "also write the numbers here")

# Draft sizes; each is looked up trained on data and distilled from the target (objectives).
DRAFT_SIZES = ("draft_l", "draft_m", "draft_s")
OBJECTIVES = ("tv", "kl")


def main(argv):
    del argv
    if _JSON_OUT.value:
        prepare_output(_JSON_OUT.value, "--json_out")  # before the measuring, not after it
    specjax.configure_cpu()  # before the first JAX computation
    logging.set_verbosity(logging.WARNING)  # orbax logs every restore at INFO
    corpus, target_size = _CORPUS.value, _TARGET.value
    try:
        target, tparams, tmeta = zoo.load(target_size, corpus)
    except FileNotFoundError as e:
        sys.exit(str(e))
    rows = {target_size: tmeta}
    drafts = {}
    for size in DRAFT_SIZES:
        if size == target_size:
            continue
        variants = [(size, None, "tv", "")] + [
            (f"{size} distilled ({o}{', fine-tuned' if init else ''})", target_size, o, init)
            for o in OBJECTIVES
            for init in ("", "data")
        ]
        for name, distill, objective, init in variants:
            try:
                model, params, meta = zoo.load(size, corpus, distill, objective, init)
            except FileNotFoundError as e:
                if distill is None:  # distilled drafts are optional
                    print(f"[missing] {e}")
                continue
            rows[name] = meta
            drafts[name] = (model, params)
    for order, name in ((2, "bigram"), (1, "unigram")):
        try:
            drafts[name] = zoo.load_ngram(order, corpus)
        except FileNotFoundError as e:
            print(f"[missing] {e}")
    seq_len = rows[target_size]["config"]["data"]["seq_len"]
    val = load_corpus(corpus, "validation")
    table = alpha_table(
        target, tparams, drafts, val, seq_len, (0.0, 1.0), 16, _MAX_WINDOWS.value or None
    )

    print(f"\nZoo on {corpus} (validation: {val.size} tokens)")
    print(f"{'model':36s} {'params':>9s} {'tokens':>8s} {'train min':>9s} {'val bits/byte':>13s}")
    for name, meta in rows.items():
        params = model_config_from_dict(meta["model"]).num_params()
        print(
            f"{name:36s} {params / 1e6:8.3f}M {meta['tokens_seen'] / 1e6:7.2f}M "
            f"{meta['train_seconds'] / 60:9.1f} {meta['eval']['bits_per_byte']:13.3f}"
        )
    print(f"\nalpha for {target_size} over {table['positions']} validation positions")
    print(f"{'draft':36s} {'alpha t=0':>9s} {'alpha t=1':>9s}")
    for name in drafts:
        print(f"{name:36s} {table[name]['alpha_t0']:9.3f} {table[name]['alpha_t1']:9.3f}")
    if _JSON_OUT.value:
        summary = {
            name: {
                "params": model_config_from_dict(m["model"]).num_params(),
                "tokens_seen": m["tokens_seen"],
                "train_seconds": m["train_seconds"],
                "eval": m["eval"],
                "fingerprint": m["fingerprint"],
            }
            for name, m in rows.items()
        }
        with open(_JSON_OUT.value, "w", encoding="utf-8") as f:
            json.dump({"corpus": corpus, "models": summary, "alpha": table}, f, indent=1)


if __name__ == "__main__":
    app.run(main)
