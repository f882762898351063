"""Generate mode: decode text prompts autoregressively and speculatively, report both side by side.

Builds the target and the draft from the config (the tiny pipeline's trained models when
`config.weights` allows and they are cached, else random initialisation unless a checkpoint is
given; n-gram drafts are fitted on a corpus split), encodes the prompts with the byte tokenizer,
runs both decoders with the same warper and key, and prints each continuation plus the statistics
(empirical α, tokens per iteration, target calls, ms per token, speedup). Everything printed is
also written to `<workdir>/generate.json`. See configs/generate.py.

The mode's parts: `models.py` (target and draft from the config), `decoders.py` (the speculative
decoder), `report.py` (the text and JSON report).
"""

from __future__ import annotations

import json
import os
import time

import jax
import numpy as np
from absl import logging

from experiments.common import pair
from experiments.generate.decoders import build_decoder, build_gamma_policy
from experiments.generate.models import (
    DRAFT_KINDS,
    build_hf_models,
    build_models,
    build_pretrained_models,
    check_cache_len,
    resolve_weights,
)
from experiments.generate.report import (
    decoder_report,
    describe_model,
    describe_warper,
    draft_description,
    format_report,
    weights_origin,
)
from specjax.benchmark.versus import versus_autoregressive
from specjax.data import EOS_ID, ByteTokenizer
from specjax.decoding import AutoregressiveDecoder, TokenTree, make_warper, parse_gamma_policy
from specjax.decoding.rules import accept_rule, is_lossless

WEIGHTS = pair.WEIGHTS


def prompts_of(config) -> list[str]:
    """The prompts: `config.chat` or `config.prompt` split at "|" (with \\n, \\t unescaped)
    if set, else `config.prompts`."""
    field = "chat" if config.get("chat") is not None else "prompt"
    text = config.get(field)
    if text is None:
        return list(config.prompts)
    if not isinstance(text, str):
        raise ValueError(f"config.{field} must be a string, got {text!r}")
    text = text.replace("\\n", "\n").replace("\\t", "\t")
    return text.split("|")


def encode_prompts(config, tokenizer, texts: list[str], add_bos: bool) -> list[np.ndarray]:
    """Token ids of the prompts: raw text, or (config.chat) one-turn chat conversations
    rendered with the tokenizer's chat template and its generation prompt."""
    if config.get("chat") is None:
        return [tokenizer.encode(p, add_bos=add_bos).astype(np.int32) for p in texts]
    ids = []
    for text in texts:
        try:
            rendered = tokenizer.apply_chat_template(
                [{"role": "user", "content": text}], add_generation_prompt=True
            )
        except ValueError as e:  # a tokenizer without a chat template says so
            raise ValueError(f"config.chat: {e}") from e
        ids.append(np.asarray(rendered, np.int32))
    return ids


def _check_config(config) -> None:
    if config.draft_kind not in DRAFT_KINDS:
        raise ValueError(
            f"config.draft_kind must be one of {DRAFT_KINDS}, got {config.draft_kind!r}"
        )
    if config.get("weights", "random") not in WEIGHTS:
        raise ValueError(f"config.weights must be one of {WEIGHTS}, got {config.weights!r}")
    prompts = prompts_of(config)
    field = "chat" if config.get("chat") is not None else "prompt"
    field = field if config.get(field) is not None else "prompts"
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
    if config.get("target_pretrained") and config.target_hf_checkpoint:
        raise ValueError(
            "config.target_pretrained and config.target_hf_checkpoint both name a target: give one"
        )
    weights, note = resolve_weights(config)  # the note is printed with the report
    if config.get("target_pretrained"):
        target, target_params, draft, tokenizer = build_pretrained_models(config)
        eos_id = tokenizer.eos_id
        add_bos = getattr(tokenizer, "add_bos", tokenizer.bos_id is not None)
        weights = {"target": config.target_pretrained, "draft": None}
    elif config.target_hf_checkpoint:
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
    prompts = encode_prompts(config, tokenizer, texts, add_bos)

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
        name: decoder_report(results[name], tokenizer, first_call[name], v, name) for name in calls
    }
    spec_report = reports.get("spec")
    identical = None
    if spec_report is not None and warper.is_greedy:
        identical = spec_report["new_tokens"] == reports["ar"]["new_tokens"]
    random_target = weights["target"] is None
    random_draft = config.draft_kind == "transformer" and weights["draft"] is None
    result = {
        "paper": "Leviathan, Kalman & Matias 2023, arXiv:2211.17192",
        "target": f"{describe_model(target)}, {weights_origin(weights, 'target')}",
        "draft": draft_description(config, draft, weights),
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
