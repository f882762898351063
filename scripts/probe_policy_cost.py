"""What an adaptive-γ policy costs per iteration on one task: prompt lookup at batch 1 on the real
target, a fixed γ against the same γ through the adaptive drafter and a loop-calibrated policy.

    python scripts/probe_policy_cost.py --task=qa --gamma=2 --rounds=20

The adaptive-γ run (`configs/extensions.py:smollm2`) times seven decoders on six tasks in
every round, so a task's ratios share a round with the other tasks' noise. This probe times only
three decoders on one task's prompts (the first `--per_task` of `experiments/common/
real_prompts`, through the chat template, greedy, one `generate` call per prompt), with the
round order rotated (`timing.interleaved(rotate=True)`):
- `fixed<γ>`: the fixed-γ decoder, verifying as wide as each proposal;
- `via_adaptive<γ>`: `FixedGamma(γ)` through the adaptive drafter at γ_max = `--gamma_max`
  (the policy path with a constant budget);
- `--policy` (default `positional_loop+auto`), calibrated on fixed γ = 1..γ_max's measured
  iteration costs as the run does.
Prints each one's median seconds, tokens per target call, target calls and its speedup over
`fixed<γ>` with a 95 % interval over the paired rounds. When all three make the same target
calls, the ratio is the policy path's own cost. Results: experiments/extensions/README.md.
"""

import os
import sys
import time

from absl import app, flags

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import specjax  # noqa: E402

specjax.configure_cpu()  # before JAX starts; SPECJAX_NO_XLA_FLAGS=1 opts out

FLAGS = flags.FLAGS
flags.DEFINE_string("model", "smollm2-135m-instruct", "target: a registered name or a .gguf path")
flags.DEFINE_string("task", "qa", "the task of experiments/common/real_prompts")
flags.DEFINE_integer("per_task", 2, "its first prompts", lower_bound=1)
flags.DEFINE_integer("gamma", 2, "the fixed γ compared", lower_bound=1)
flags.DEFINE_integer("gamma_max", 5, "γ_max of the adaptive decoders", lower_bound=1)
flags.DEFINE_string("policy", "positional_loop+auto", "a policy name of the adaptive run")
flags.DEFINE_integer("rounds", 20, "timed rounds", lower_bound=2)
flags.DEFINE_integer("max_new_tokens", 48, "new tokens per prompt", lower_bound=1)
flags.DEFINE_integer("cache_len", 1024, "KV cache length")


def main(argv):
    del argv
    import jax

    from experiments.common import real_drafts
    from experiments.common.real_prompts import PROMPTS, SAMPLE_PROMPTS, Prompt, by_task
    from experiments.extensions.adaptive import decode_each, iteration_costs, policy_of
    from experiments.extensions.adaptive_real import prompt_bucket
    from specjax.benchmark.timing import interleaved, ratio_interval
    from specjax.decoding import (
        FixedGamma,
        LookupDrafter,
        SpeculativeDecoder,
        make_warper,
        summarize_stats,
    )
    from specjax.pretrained import load_pretrained

    if FLAGS.gamma > FLAGS.gamma_max:
        raise app.UsageError(f"--gamma={FLAGS.gamma} exceeds --gamma_max={FLAGS.gamma_max}")
    target, tparams, tok = load_pretrained(FLAGS.model, "target")
    draft = LookupDrafter(target.vocab_size, 3)
    prompts = by_task(FLAGS.task, PROMPTS)[: FLAGS.per_task]
    if not prompts:
        raise app.UsageError(f"--task={FLAGS.task!r}: no such task in real_prompts")
    ids = real_drafts.chat_ids(tok, prompts)
    calibration = real_drafts.chat_ids(tok, [Prompt("calibration", SAMPLE_PROMPTS[0])])
    bucket = prompt_bucket(ids + calibration, FLAGS.cache_len)
    key = jax.random.PRNGKey(0)

    def decoder(gamma, policy=None, widths="auto"):
        return SpeculativeDecoder(
            target, draft, gamma, make_warper(0.0), FLAGS.cache_len, min_bucket=bucket,
            gamma_policy=policy, verify_widths=widths,
        )  # fmt: skip

    fixed = {f"fixed{g}": decoder(g) for g in range(1, FLAGS.gamma_max + 1)}
    gammas = range(1, FLAGS.gamma_max + 1)
    per_it = iteration_costs(fixed, gammas, tparams, {}, calibration, key, 32, time.perf_counter)
    print("iteration ms at γ = 1..γ_max:", [round(x * 1e3, 2) for x in per_it])
    policy, widths = policy_of(FLAGS.policy, None, 0.0, per_it)
    reference = f"fixed{FLAGS.gamma}"
    decoders = {
        reference: fixed[reference],
        f"via_adaptive{FLAGS.gamma}": decoder(FLAGS.gamma_max, FixedGamma(FLAGS.gamma)),
        FLAGS.policy: decoder(FLAGS.gamma_max, policy, widths),
    }
    new, eos = FLAGS.max_new_tokens, tok.eos_id
    calls = {
        n: (lambda d=d: decode_each(d, tparams, {}, ids, key, new, eos))
        for n, d in decoders.items()
    }
    timed = interleaved(calls, FLAGS.rounds, rotate=True)
    base = timed[reference]
    for name, t in timed.items():
        s = summarize_stats([r.stats for r in t.output])
        low, high = ratio_interval(base.samples, t.samples)
        print(
            f"{name:24s} median {t.median:.3f} s  tokens/call "
            f"{s['tokens_emitted'] / s['target_calls']:.2f}  calls {s['target_calls']}  "
            f"vs {reference} {base.median / t.median:.3f} ({low:.3f}-{high:.3f})"
        )


if __name__ == "__main__":
    app.run(main)
