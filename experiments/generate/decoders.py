"""Generate mode: the speculative decoder a config asks for (a γ-chain, or a token tree).

`build_gamma_policy` resolves `config.gamma_policy` ("theory" measures the pair's step costs
first); `build_decoder` builds a `SpeculativeDecoder` or a `TreeSpeculativeDecoder` (prompt-lookup
drafts grow into a `LookupTreeDrafter`).
"""

from __future__ import annotations

from specjax.benchmark import costs
from specjax.decoding import (
    COST_MODEL_POLICIES,
    LookupTreeDrafter,
    SpeculativeDecoder,
    TreeSpeculativeDecoder,
    parse_gamma_policy,
)
from specjax.decoding.rules import accept_rule


def build_gamma_policy(config, target=None, target_params=None, draft=None):
    """The adaptive-γ policy of `config.gamma_policy` (None: fixed γ).

    "theory" or "positional" without a configured c measures the draft/target step costs and
    the target's T(k) for k = 1..gamma + 1 (in-loop, `benchmark.costs`) before the run; that
    needs the models (target, target_params, draft = (draft_model, draft_params)).
    """
    spec = config.get("gamma_policy", "fixed")
    if spec in COST_MODEL_POLICIES and target is not None and draft is not None:
        draft_model, draft_params = draft
        where = dict(batch=1, context=min(64, config.cache_len // 2), cache_len=config.cache_len)
        t_target = costs.cost_curve(target, target_params, config.gamma + 1, **where)
        t_draft = costs.call_cost(draft_model, draft_params, 1, **where).median
        return COST_MODEL_POLICIES[spec].from_costs(t_target, t_draft)
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
