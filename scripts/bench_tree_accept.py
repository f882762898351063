"""`tree_accept` at a real vocabulary, ms per call: the walk's early exit vs the full walk.

    PYTHONPATH=. python scripts/bench_tree_accept.py
    PYTHONPATH=. python scripts/bench_tree_accept.py --vocab=49152 --batch=8 --repeats=41

Both walks give the same bits (tests/test_tree_accept_early_exit.py); the early exit stops at a
node's first accepted child and after the walk's last level, the full walk tries every sibling
slot at every depth. Random p and q (softmax of N(0, 3^2) logits), node tokens drawn from q,
every call with a new key; the two walks are timed round-robin, medians with the ratio's 95 %
interval over the paired rounds. Results: experiments/speed/REAL.md ("Sixth pass").
"""

import time

from absl import app, flags

import specjax

_VOCAB = flags.DEFINE_integer("vocab", 49152, "Vocabulary size (SmolLM2's by default).")
_BATCH = flags.DEFINE_integer("batch", 1, "Rows per call (the early exit applies up to 8).")
_REPEATS = flags.DEFINE_integer("repeats", 41, "Timed rounds.")
_CLOCK = flags.DEFINE_enum("clock", "wall", ["cpu", "wall"], "Process CPU time or wall time.")
TREES = {"chain 4": (1, 1, 1, 1), "4-2-1-1": (4, 2, 1, 1), "8-1": (8, 1), "16": (16,)}


def _call(tree, tokens, probs, p, replacement, max_batch):
    """A zero-argument call of tree_accept compiled with EARLY_EXIT_MAX_BATCH = max_batch."""
    import jax

    from specjax.decoding import tree_accept
    from specjax.decoding.rules import tree as tree_rule

    tree_rule.EARLY_EXIT_MAX_BATCH = max_batch  # read when traced, just below
    fn = jax.jit(lambda k: tree_accept(k, tree, tokens, probs, p, replacement=replacement))
    fn(jax.random.key(0))
    counter = iter(range(1, 1 << 30))
    return lambda: fn(jax.random.key(next(counter)))  # a new key every call


def main(argv):
    del argv
    specjax.configure_cpu()
    import jax
    import jax.numpy as jnp
    import numpy as np

    from specjax.benchmark.timing import interleaved, ratio_interval
    from specjax.decoding import TokenTree

    clock = time.process_time if _CLOCK.value == "cpu" else time.perf_counter
    vocab, batch = _VOCAB.value, _BATCH.value
    print(f"tree_accept, vocab {vocab}, batch {batch}, {jax.default_backend()}, {_CLOCK.value}")
    print("| tree | nodes | children | full walk ms | early exit ms | ratio (95 %) |")
    print("|---|---|---|---|---|---|")
    for name, branching in TREES.items():
        tree = TokenTree.from_branching(branching)
        n = tree.num_nodes
        keys = jax.random.split(jax.random.key(0), 3)
        p = jax.nn.softmax(3.0 * jax.random.normal(keys[0], (batch, n, vocab)))
        q = jax.nn.softmax(3.0 * jax.random.normal(keys[1], (batch, n, vocab)))
        tokens = jax.random.categorical(keys[2], jnp.log(q))  # [batch, n]
        for label, probs, replacement in (
            ("sampled, with replacement", q, True),
            ("sampled, without", q, False),
            ("point masses", None, True),
        ):
            calls = {
                walk: _call(tree, tokens, probs, p, replacement, max_batch)
                for walk, max_batch in (("full", 0), ("early", batch))
            }
            timings = interleaved(calls, repeats=_REPEATS.value, clock=clock)
            full, early = timings["full"], timings["early"]
            low, high = ratio_interval(full.samples, early.samples) or (np.nan, np.nan)
            print(
                f"| {name} | {n} | {label} | {full.median * 1e3:.2f} | {early.median * 1e3:.2f} "
                f"| {full.median / early.median:.2f}x ({low:.2f}-{high:.2f}) |"
            )


if __name__ == "__main__":
    app.run(main)
