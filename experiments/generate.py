"""Generate mode: decode text prompts autoregressively and speculatively, report both side by side.

Builds the target and the draft from the config (random initialisation unless a checkpoint is
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

from specjax.benchmark import costs
from specjax.benchmark.timing import interleaved
from specjax.data import EOS_ID, ByteTokenizer, load_corpus
from specjax.decoding.autoregressive import AutoregressiveDecoder
from specjax.decoding.gamma_policy import TheoryGamma, parse_gamma_policy
from specjax.decoding.lookup_tree import LookupTreeDrafter
from specjax.decoding.rules import accept_rule
from specjax.decoding.sampling import make_warper
from specjax.decoding.speculative import SpeculativeDecoder
from specjax.decoding.tree import TokenTree
from specjax.decoding.tree_decoder import TreeSpeculativeDecoder
from specjax.models import TransformerLM, build

DRAFT_KINDS = ("transformer", "bigram", "unigram", "uniform", "prompt_lookup", "self", "none")


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


def build_models(config, vocab_size: int):
    """Target and draft as the config says (checkpoints, or random weights from config.seed).

    Returns:
      (target, target_params, draft) where draft is (model, params) or None.
    """
    key_target, key_draft = jax.random.split(jax.random.PRNGKey(config.seed))
    target, target_params = load_or_init(
        config.target, config.target_checkpoint, vocab_size, key_target, "target"
    )
    draft = build_draft(config, target, target_params, vocab_size, key_draft)
    return target, target_params, draft


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
    prompts = list(config.prompts)
    if not prompts or not all(isinstance(p, str) and p for p in prompts):
        raise ValueError(
            f"config.prompts must be a non-empty list of non-empty strings; got {prompts!r}"
        )
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


def _decoder_report(result, tokenizer, first_call_s: float, median_s: float) -> dict:
    new = result.new_tokens()
    emitted = int(sum(len(row) for row in new))
    report = {
        "continuations": [tokenizer.decode(row, stop_at_eos=True) for row in new],
        "new_tokens": [row.tolist() for row in new],
        "first_call_s": first_call_s,
        "median_s": median_s,
        "ms_per_token": median_s * 1e3 / max(emitted, 1),
        "stats": result.summary(),
    }
    return report


def _describe(model) -> str:
    if isinstance(model, TransformerLM):
        c = model.config
        family = "gpt2" if c.positions == "learned" else "llama"
        return f"{family} d={c.embed_dim} L={c.num_layers} ({c.num_params() / 1e6:.1f}M params)"
    return type(model).__name__


def _shape(result: dict) -> str:
    tree = result.get("tree")
    if tree is None:
        accept = result.get("accept", "tokenwise")
        policy = result.get("gamma_policy", "fixed")
        text = f"gamma={result['gamma']}" + ("" if policy == "fixed" else f" (max, {policy})")
        return text + ("" if accept == "tokenwise" else f", {accept}")
    rule = "with" if tree["replacement"] else "without"
    return f"tree of {tree['nodes']} nodes, depth {tree['depth']} (siblings {rule} replacement)"


def format_report(result: dict) -> str:
    """Renders the result dict as terminal text."""
    ar, spec = result["autoregressive"], result["speculative"]
    out = [
        f"Generate: target {result['target']}; draft {result['draft']}; {_shape(result)}; "
        f"{result['warper']}; up to {result['max_new_tokens']} new tokens",
        "",
    ]
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
    return "\n".join(out)


def run(config, workdir: str) -> dict:
    """Generate mode entry point: prints the report and writes generate.json.

    Args:
      config: the ConfigDict of configs/generate.py.
      workdir: output directory.

    Returns:
      The result dict that was written to generate.json.
    """
    _check_config(config)
    if config.draft_hf_checkpoint and not config.target_hf_checkpoint:
        raise ValueError("config.draft_hf_checkpoint needs config.target_hf_checkpoint too")
    if config.target_hf_checkpoint:
        target, target_params, draft, tokenizer = build_hf_models(config)
        eos_id = tokenizer.eos_id
        add_bos = tokenizer.bos_id is not None
    else:
        tokenizer = ByteTokenizer()
        target, target_params, draft = build_models(config, tokenizer.vocab_size)
        eos_id, add_bos = EOS_ID, True
    key_sample = jax.random.fold_in(jax.random.PRNGKey(config.seed), 2)
    warper = make_warper(config.temperature, config.top_k or None, config.top_p)
    prompts = [tokenizer.encode(p, add_bos=add_bos).astype(np.int32) for p in config.prompts]

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
    timings = interleaved(calls, repeats=config.timing_repeats, warmup=0)

    reports = {
        name: _decoder_report(results[name], tokenizer, first_call[name], timings[name].median)
        for name in calls
    }
    spec_report = reports.get("spec")
    identical = None
    if spec_report is not None and warper.is_greedy:
        identical = spec_report["new_tokens"] == reports["ar"]["new_tokens"]
    result = {
        "paper": "Leviathan, Kalman & Matias 2023, arXiv:2211.17192",
        "target": _describe(target),
        "draft": "none (autoregressive only)"
        if draft is None
        else f"{config.draft_kind}: {_describe(draft[0])}",
        "gamma": int(config.gamma),
        "accept": config.accept,
        "gamma_policy": str(config.get("gamma_policy", "fixed")),
        "tree": None
        if tree is None
        else {
            "parents": list(tree.parents),
            "nodes": tree.num_nodes,
            "depth": tree.max_depth,
            "replacement": bool(config.tree_replacement),
        },
        "warper": "greedy" if warper.is_greedy else repr(warper.warpers),
        "max_new_tokens": int(config.max_new_tokens),
        "prompts": list(config.prompts),
        "autoregressive": reports["ar"],
        "speculative": spec_report,
        "speedup": None
        if spec_report is None
        else reports["ar"]["ms_per_token"] / spec_report["ms_per_token"],
        "greedy_identical": identical,
    }
    print(format_report(result), flush=True)
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "generate.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"config": config.to_dict(), **result}, f, indent=1)
    logging.info("Wrote %s", path)
    return result
