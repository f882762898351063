"""Generate mode: decode text prompts autoregressively and speculatively, report both side by side.

Builds the target and the draft from the config (the main job's trained tiny models when
`config.weights` allows and they are cached, else random initialisation unless a checkpoint is
given; n-gram drafts are fitted on a corpus split), encodes the prompts with the byte tokenizer,
runs both decoders with the same warper and key, and prints each continuation plus the statistics
(empirical α, tokens per iteration, target calls, ms per token, speedup). Everything printed is
also written to `<workdir>/generate.json`. See configs/generate.py.
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np
from absl import logging

from experiments.common import pair
from specjax.benchmark import costs
from specjax.benchmark.versus import versus_autoregressive
from specjax.data import EOS_ID, ByteTokenizer, load_corpus
from specjax.decoding import (
    AutoregressiveDecoder,
    Greedy,
    LookupTreeDrafter,
    SpeculativeDecoder,
    Temperature,
    TheoryGamma,
    TokenTree,
    TopK,
    TopP,
    TreeSpeculativeDecoder,
    make_warper,
    parse_gamma_policy,
)
from specjax.decoding.rules import accept_rule, is_lossless
from specjax.models import TransformerLM, build

DRAFT_KINDS = ("transformer", "bigram", "unigram", "uniform", "prompt_lookup", "self", "none")
WEIGHTS = pair.WEIGHTS


def resolve_weights(config) -> tuple[dict, str | None]:
    """Which checkpoints to load, following `config.weights` (`experiments/common/pair.py`).

    Returns:
      ({"target": path | None, "draft": path | None, "trained": bool}, note): the note is one
      line for the user when "auto" falls back to random weights, else None.

    Raises:
      FileNotFoundError: weights="trained" and the trained models are not cached.
    """
    weights = config.get("weights", "random")
    chosen = {
        "target": config.target_checkpoint,
        "draft": config.draft_checkpoint,
        "trained": False,
    }
    if weights == "random" or config.target_checkpoint or config.target_hf_checkpoint:
        return chosen, None
    transformer_draft = config.draft_kind == "transformer"
    dirs, note = pair.main_job_pair(weights, need_draft=transformer_draft)
    if dirs is None:
        return chosen, note
    chosen["target"] = dirs["target"]
    if transformer_draft and not config.draft_checkpoint:
        chosen["draft"] = dirs["draft"]
    chosen["trained"] = True
    return chosen, None


def prompts_of(config) -> list[str]:
    """The prompts: `config.prompt` split at "|" (with \\n, \\t unescaped) if set, else
    `config.prompts`."""
    text = config.get("prompt")
    if text is None:
        return list(config.prompts)
    if not isinstance(text, str):
        raise ValueError(f"config.prompt must be a string, got {text!r}")
    text = text.replace("\\n", "\n").replace("\\t", "\t")
    return text.split("|")


def describe_warper(warper) -> str:
    """ "greedy" or e.g. "sampling: temperature 0.8, top-k 20, top-p 0.95"."""
    if warper.is_greedy:
        return "greedy"
    temperature, parts = 1.0, []
    for w in warper.warpers:
        if isinstance(w, Temperature):
            temperature = w.temperature
        elif isinstance(w, TopK):
            parts.append(f"top-k {w.top_k}")
        elif isinstance(w, TopP):
            parts.append(f"top-p {w.top_p:g}")
        elif not isinstance(w, Greedy):
            parts.append(type(w).__name__)
    return "sampling: " + ", ".join([f"temperature {temperature:g}"] + parts)


def format_count(n: int) -> str:
    """1234 -> "1.2K", 25_600_000 -> "25.6M" (params of tiny and large models alike)."""
    for scale, suffix in ((1e9, "B"), (1e6, "M"), (1e3, "K")):
        if n >= scale:
            return f"{n / scale:.1f}{suffix}"
    return str(int(n))


def load_or_init(fields, checkpoint: str | None, vocab_size: int, key, name: str):
    """A transformer and its parameters: from `checkpoint` if given, else randomly initialised.

    Args:
      fields: the model's config section (ignored when a checkpoint is loaded: the checkpoint
        carries its own model config).
      checkpoint: a path, or None.
      vocab_size: the tokenizer's vocabulary; a loaded model must match it.
      key: PRNG key for random initialisation.
      name: "target" or "draft", for error messages.

    Returns:
      (TransformerLM, params).
    """
    if checkpoint is None:
        return build.init_model(fields, vocab_size, key, where=f"config.{name}")
    if not os.path.exists(checkpoint):
        raise FileNotFoundError(
            f"config.{name}_checkpoint={checkpoint!r} does not exist; give a training run's "
            "workdir, a checkpoint directory or an exported model, or leave it None for random "
            "weights"
        )
    # Imported here: orbax is only needed when a checkpoint is actually loaded.
    from specjax import checkpoint as checkpoint_lib

    model, params, _ = checkpoint_lib.load_model(checkpoint)
    if model.vocab_size != vocab_size:
        raise ValueError(
            f"config.{name}_checkpoint={checkpoint!r} holds a model with vocab_size="
            f"{model.vocab_size}, but the byte tokenizer has {vocab_size}"
        )
    return model, params


def build_draft(config, target, target_params, vocab_size: int, key):
    """The draft model and its parameters for `config.draft_kind` (None for "none").

    Returns:
      (model, params) or None.
    """
    kind = config.draft_kind
    if kind not in DRAFT_KINDS:
        raise ValueError(f"config.draft_kind must be one of {DRAFT_KINDS}, got {kind!r}")
    if kind == "transformer":
        return load_or_init(config.draft, config.draft_checkpoint, vocab_size, key, "draft")
    tokens = None
    if kind in ("bigram", "unigram"):
        ngram = config.ngram
        if ngram.max_tokens < 2:
            raise ValueError(f"config.ngram.max_tokens must be >= 2, got {ngram.max_tokens}")
        tokens = load_corpus(ngram.corpus, ngram.split)[: ngram.max_tokens]
    return build.build_draft(
        kind,
        target,
        target_params,
        tokens=tokens,
        smoothing=config.ngram.smoothing,
        max_ngram=config.prompt_lookup.max_ngram,
        min_ngram=config.prompt_lookup.min_ngram,
    )


def build_models(config, vocab_size: int, checkpoints: dict | None = None):
    """Target and draft as the config says (checkpoints, or random weights from config.seed).

    Args:
      config: the generate config.
      vocab_size: the tokenizer's.
      checkpoints: {"target": path | None, "draft": path | None} (`resolve_weights`); None:
        config.target_checkpoint / config.draft_checkpoint.

    Returns:
      (target, target_params, draft) where draft is (model, params) or None.
    """
    if checkpoints is None:
        checkpoints = {"target": config.target_checkpoint, "draft": config.draft_checkpoint}
    key_target, key_draft = jax.random.split(jax.random.PRNGKey(config.seed))
    target, target_params = load_or_init(
        config.target, checkpoints["target"], vocab_size, key_target, "target"
    )
    if checkpoints["draft"] != config.draft_checkpoint:
        config = config.copy_and_resolve_references()
        config.draft_checkpoint = checkpoints["draft"]
    draft = build_draft(config, target, target_params, vocab_size, key_draft)
    return target, target_params, draft


def check_cache_len(config, target, draft) -> None:
    """Raises naming config.cache_len if it exceeds a model's learned position table."""
    for name, model in (("target", target), ("draft", None if draft is None else draft[0])):
        c = getattr(model, "config", None)
        if c is None or getattr(c, "positions", None) != "learned":
            continue
        if config.cache_len > c.max_len:
            raise ValueError(
                f"config.cache_len={config.cache_len} exceeds the {name} model's learned "
                f"position table ({c.max_len} positions): set --config.cache_len={c.max_len} or "
                "less (prompt + max_new_tokens + gamma must fit in it)"
            )


HF_DRAFT_KINDS = ("self", "uniform", "prompt_lookup", "none")


def build_hf_models(config):
    """Target (and draft) from local Hugging Face checkpoint directories (needs `.[hf]`).

    Returns:
      (target, target_params, draft, tokenizer) where draft is (model, params) or None.
    """
    from specjax.convert import load_hf_model, load_hf_pair  # optional dependency

    if config.draft_hf_checkpoint:
        pair = load_hf_pair(
            config.target_hf_checkpoint, config.draft_hf_checkpoint, config.hf_dtype
        )
        target, target_params, tokenizer = pair.target, pair.target_params, pair.tokenizer
        draft = (pair.draft, pair.draft_params)
    else:
        if config.draft_kind not in HF_DRAFT_KINDS:
            raise ValueError(
                f"config.draft_kind={config.draft_kind!r} needs byte-level models; with an HF "
                f"target use one of {HF_DRAFT_KINDS} or give --draft_hf_checkpoint"
            )
        target, target_params, tokenizer = load_hf_model(
            config.target_hf_checkpoint, config.hf_dtype
        )
        key = jax.random.PRNGKey(config.seed)
        draft = build_draft(config, target, target_params, target.vocab_size, key)
    if tokenizer is None:
        raise ValueError(
            f"{config.target_hf_checkpoint} ships no tokenizer files (or neither transformers "
            "nor tokenizers is installed): generate mode needs one to encode the prompts"
        )
    return target, target_params, draft, tokenizer


def _check_config(config) -> None:
    if config.draft_kind not in DRAFT_KINDS:
        raise ValueError(
            f"config.draft_kind must be one of {DRAFT_KINDS}, got {config.draft_kind!r}"
        )
    if config.get("weights", "random") not in WEIGHTS:
        raise ValueError(f"config.weights must be one of {WEIGHTS}, got {config.weights!r}")
    prompts = prompts_of(config)
    field = "prompts" if config.get("prompt") is None else "prompt"
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError(
            f'config.{field} must give non-empty prompts ("|" separates several in '
            f"config.prompt); got {prompts!r}"
        )
    for name, low in (("gamma", 1), ("max_new_tokens", 1), ("top_k", 0), ("cache_len", 2)):
        value = config[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            disabled = " (0 disables top-k)" if name == "top_k" else ""
            raise ValueError(f"config.{name} must be an integer >= {low}{disabled}, got {value!r}")
    if not 0 < config.top_p <= 1:
        raise ValueError(f"config.top_p must lie in (0, 1] (1 disables top-p), got {config.top_p}")
    if not config.temperature >= 0:
        raise ValueError(f"config.temperature must be >= 0 (0 is greedy), got {config.temperature}")
    accept_rule(config.accept)  # an unknown rule name fails here, before models are built
    if config.tree and config.accept != "tokenwise":
        raise ValueError(
            f"config.accept={config.accept!r} applies to the gamma-chain; a token tree "
            "(config.tree) is verified by tree_accept"
        )
    parse_gamma_policy(config.get("gamma_policy", "fixed"))  # raises naming a bad policy
    repeats = config.timing_repeats
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"config.timing_repeats must be an integer >= 1, got {repeats!r}")


def build_gamma_policy(config, target=None, target_params=None, draft=None):
    """The adaptive-γ policy of `config.gamma_policy` (None: fixed γ).

    "theory" without a configured c measures the draft/target step costs and the target's
    T(k) for k = 1..gamma + 1 (in-loop, `benchmark.costs`) before the run; that needs the
    models (target, target_params, draft = (draft_model, draft_params)).
    """
    spec = config.get("gamma_policy", "fixed")
    if spec == "theory" and target is not None and draft is not None:
        draft_model, draft_params = draft
        where = dict(batch=1, context=min(64, config.cache_len // 2), cache_len=config.cache_len)
        t_target = costs.cost_curve(target, target_params, config.gamma + 1, **where)
        t_draft = costs.call_cost(draft_model, draft_params, 1, **where).median
        return TheoryGamma.from_costs(t_target, t_draft)
    return parse_gamma_policy(spec)


def build_decoder(config, target, draft_model, warper, tree, gamma_policy=None):
    """The speculative decoder: a gamma-chain, or a token tree when `config.tree` is set."""
    if tree is None:
        return SpeculativeDecoder(
            target,
            draft_model,
            config.gamma,
            warper,
            config.cache_len,
            config.min_bucket,
            accept=accept_rule(config.accept),
            gamma_policy=gamma_policy,
        )
    if gamma_policy is not None:
        raise ValueError(
            f"config.gamma_policy={config.gamma_policy!r} applies to a gamma-chain, not a tree"
        )
    draft = draft_model
    if config.draft_kind == "prompt_lookup":  # earlier matches' continuations as the tree
        draft = LookupTreeDrafter(
            target.vocab_size,
            tree,
            max_ngram=config.prompt_lookup.max_ngram,
            min_ngram=config.prompt_lookup.min_ngram,
        )
    return TreeSpeculativeDecoder(
        target,
        draft,
        tree,
        warper,
        replacement=bool(config.tree_replacement),
        cache_len=config.cache_len,
        min_bucket=config.min_bucket,
        children=config.tree_children,
    )


def _decoder_report(result, tokenizer, first_call_s: float, versus, name: str) -> dict:
    new = result.new_tokens()
    report = {
        "continuations": [tokenizer.decode(row, stop_at_eos=True) for row in new],
        "new_tokens": [row.tolist() for row in new],
        "first_call_s": first_call_s,
        "median_s": versus.timings[name].median,
        "ms_per_token": versus.ms_per_token(name),
        "stats": result.summary(),
    }
    return report


def _describe(model) -> str:
    if isinstance(model, TransformerLM):
        c = model.config
        family = "gpt2" if c.positions == "learned" else "llama"
        return f"{family} d={c.embed_dim} L={c.num_layers} ({format_count(c.num_params())} params)"
    return type(model).__name__


def _draft_description(config, draft, weights: dict) -> str:
    if draft is None:
        return "none (autoregressive only)"
    kind = config.draft_kind
    if kind == "self":
        return "self (the target itself: α = 1, at the cost of a target call per draft)"
    text = f"{kind}: {_describe(draft[0])}"
    if kind == "transformer":
        text += ", " + _origin(weights, "draft")
    elif kind in ("bigram", "unigram"):
        text += f" fitted on {config.ngram.max_tokens:,} {config.ngram.corpus} tokens"
    return text


def _origin(weights: dict, name: str) -> str:
    if weights.get(name) is None:
        return "random weights"
    if weights.get("trained"):
        return "trained (the main job's " + ("distilled draft)" if name == "draft" else "target)")
    return f"from {weights[name]}"


def _shape(result: dict) -> str:
    if result.get("speculative") is None:
        return "autoregressive only"
    tree = result.get("tree")
    if tree is None:
        accept = result.get("accept", "tokenwise")
        policy = result.get("gamma_policy", "fixed")
        text = f"gamma={result['gamma']}" + ("" if policy == "fixed" else f" (max, {policy})")
        lossy = (
            "" if result.get("lossless", True) else " (LOSSY: output does not follow the target)"
        )
        return text + ("" if accept == "tokenwise" else f", {accept}") + lossy
    rule = "with" if tree["replacement"] else "without"
    return f"tree of {tree['nodes']} nodes, depth {tree['depth']} (siblings {rule} replacement)"


def format_report(result: dict) -> str:
    """Renders the result dict as terminal text."""
    ar, spec = result["autoregressive"], result["speculative"]
    out = [
        f"Generate: target {result['target']}",
        f"          draft  {result['draft']}",
        f"          {_shape(result)}; {result['warper']}; up to {result['max_new_tokens']} new "
        f"tokens per prompt",
    ]
    if result.get("note"):
        out.append(result["note"])
    elif result.get("trained") and result["warper"] == "greedy":
        out.append(
            "(the main job's models train for minutes: their greedy text repeats itself; "
            "--config.temperature=0.8 samples code-like text, at a smaller speedup)"
        )
    out.append("")
    for i, prompt in enumerate(result["prompts"]):
        out.append(f"[{i}] prompt:         {prompt!r}")
        out.append(f"    autoregressive: {ar['continuations'][i]!r}")
        if spec is not None:
            out.append(f"    speculative:    {spec['continuations'][i]!r}")
    out += [
        "",
        "decoder          ms/token  first call (s)  target calls  tokens/iter  alpha",
        f"autoregressive  {ar['ms_per_token']:9.3f}  {ar['first_call_s']:14.2f}  "
        f"{ar['stats']['target_calls']:12d}  {ar['stats']['tokens_per_iteration']:11.3f}      -",
    ]
    if spec is not None:
        s = spec["stats"]
        out.append(
            f"speculative     {spec['ms_per_token']:9.3f}  {spec['first_call_s']:14.2f}  "
            f"{s['target_calls']:12d}  {s['tokens_per_iteration']:11.3f}  "
            f"{s['alpha_empirical']:.3f}"
        )
        by_position = ", ".join(f"{a:.3f}" for a in s["acceptance_by_position"])
        what = "depth" if result.get("tree") else "draft position"
        out += [
            "",
            f"speedup (AR ms/token / speculative ms/token): {result['speedup']:.3f}x",
            f"acceptance rate by {what}: [{by_position}]",
        ]
        if "mean_gamma" in s:
            out.append(
                f"adaptive γ: mean {s['mean_gamma']:.2f}, histogram {s['drafted_histogram']}"
            )
        if "accepted_rank_by_depth" in s:
            ranks = ", ".join(f"{a:.3f}" for a in s["accepted_rank_by_depth"][0])
            out.append(f"acceptance by sibling rank at depth 1: [{ranks}]")
        if result["greedy_identical"] is not None:
            out.append(f"greedy outputs identical: {result['greedy_identical']}")
        else:
            out.append(
                "the two texts differ: at temperature > 0 both decoders sample the target's "
                "distribution with different random draws (only greedy output is token-identical)"
            )
        if len(result["prompts"]) > 1:
            out.append(
                f"target calls: one per loop iteration of the whole batch ({len(result['prompts'])}"
                " rows decoded together), so the slowest row sets them; tokens/iter is the mean "
                "per row and iteration, so target calls >= new tokens of a row / tokens/iter"
            )
        why = _why_no_speedup(result)
        if why:
            out.append(why)
    return "\n".join(out)


def _why_no_speedup(result: dict) -> str | None:
    """One line on why the speculative decoder was not faster, when it was not."""
    spec = result.get("speculative")
    return pair.why_no_speedup(
        result["speedup"],
        0.0 if spec is None else spec["stats"]["alpha_empirical"],
        random_weights=bool(result.get("random_weights")),
        self_draft="draft=self" if result.get("draft_kind") == "self" else None,
    )


def run(config, workdir: str) -> dict:
    """Generate mode entry point: prints the report and writes generate.json.

    Args:
      config: the ConfigDict of configs/generate.py.
      workdir: output directory.

    Returns:
      The result dict that was written to generate.json.
    """
    _check_config(config)
    if is_lossless(accept_rule(config.accept)) is False:
        logging.warning(
            "config.accept=%r is LOSSY: the speculative output does not follow the target "
            "(recorded as lossless=False in generate.json)",
            config.accept,
        )
    if config.draft_hf_checkpoint and not config.target_hf_checkpoint:
        raise ValueError("config.draft_hf_checkpoint needs config.target_hf_checkpoint too")
    weights, note = resolve_weights(config)  # the note is printed with the report
    if config.target_hf_checkpoint:
        target, target_params, draft, tokenizer = build_hf_models(config)
        eos_id = tokenizer.eos_id
        add_bos = tokenizer.bos_id is not None
        weights = {"target": config.target_hf_checkpoint, "draft": config.draft_hf_checkpoint}
    else:
        tokenizer = ByteTokenizer()
        target, target_params, draft = build_models(config, tokenizer.vocab_size, weights)
        eos_id, add_bos = EOS_ID, True
    check_cache_len(config, target, draft)
    key_sample = jax.random.fold_in(jax.random.PRNGKey(config.seed), 2)
    warper = make_warper(config.temperature, config.top_k or None, config.top_p)
    texts = prompts_of(config)
    prompts = [tokenizer.encode(p, add_bos=add_bos).astype(np.int32) for p in texts]

    ar = AutoregressiveDecoder(target, warper, config.cache_len, config.min_bucket)
    calls = {
        "ar": lambda: ar.generate(target_params, prompts, key_sample, config.max_new_tokens, eos_id)
    }
    tree = None if not config.tree else TokenTree.parse(config.tree)
    if draft is not None:
        draft_model, draft_params = draft
        policy = build_gamma_policy(config, target, target_params, draft)
        spec = build_decoder(config, target, draft_model, warper, tree, policy)
        calls["spec"] = lambda: spec.generate(
            target_params, draft_params, prompts, key_sample, config.max_new_tokens, eos_id
        )

    # The first call compiles; it is timed on its own, then the decoders are timed round-robin
    # (drift on a shared CPU hits both alike) and medians are reported.
    results, first_call = {}, {}
    for name, call in calls.items():
        start = time.perf_counter()
        results[name] = jax.block_until_ready(call())
        first_call[name] = time.perf_counter() - start
        logging.info("%s: first call (compile + run) %.2f s", name, first_call[name])
    v = versus_autoregressive(calls, repeats=config.timing_repeats, warmup=0)

    reports = {
        name: _decoder_report(results[name], tokenizer, first_call[name], v, name) for name in calls
    }
    spec_report = reports.get("spec")
    identical = None
    if spec_report is not None and warper.is_greedy:
        identical = spec_report["new_tokens"] == reports["ar"]["new_tokens"]
    random_target = weights["target"] is None
    random_draft = config.draft_kind == "transformer" and weights["draft"] is None
    result = {
        "paper": "Leviathan, Kalman & Matias 2023, arXiv:2211.17192",
        "target": f"{_describe(target)}, {_origin(weights, 'target')}",
        "draft": _draft_description(config, draft, weights),
        "draft_kind": config.draft_kind,
        "random_weights": bool(random_target or random_draft),
        "trained": bool(weights.get("trained")),
        "note": note,
        "gamma": int(config.gamma),
        "accept": config.accept,
        "lossless": bool(is_lossless(accept_rule(config.accept)) is not False),
        "gamma_policy": str(config.get("gamma_policy", "fixed")),
        "tree": None
        if tree is None
        else {
            "parents": list(tree.parents),
            "nodes": tree.num_nodes,
            "depth": tree.max_depth,
            "replacement": bool(config.tree_replacement),
        },
        "warper": describe_warper(warper),
        "max_new_tokens": int(config.max_new_tokens),
        "prompts": texts,
        "autoregressive": reports["ar"],
        "speculative": spec_report,
        "speedup": None if spec_report is None else v.speedup("spec"),
        "greedy_identical": identical,
    }
    print(format_report(result), flush=True)
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "generate.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"config": config.to_dict(), **result}, f, indent=1)
    logging.info("Wrote %s", path)
    return result
