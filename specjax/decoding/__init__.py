"""Decoding: the loop driver, decoders, drafters, acceptance rules and sampling warpers.

    from specjax.decoding import SpeculativeDecoder, make_warper

    decoder = SpeculativeDecoder(target, draft, gamma=4, warper=make_warper(temperature=1.0))
    result = decoder.generate(
        target_params, draft_params, prompts=prompts, key=key, max_new_tokens=64
    )

Every decoder is called alike: its models' params first (target, then draft), then keywords
(`loop.py`'s docstring; the older positional forms are the same signatures). Callers import
from this facade; the modules below may move between releases.

At the top, what every decoder shares:
  * `loop.py`: one driver (`generate`, `stream`, the jitted programs) for any decoder that offers
    `models`, `init` and `step`; `LoopState` is every decoder's loop state. `arguments.py`:
    the host-side checks of a decoder's arguments (cache length, prompts, params, EOS, key),
    each naming the argument. `state.py`: the output sequences, `emit` and the counters;
    `stats.py`: their host-side summary; `prompts.py`: padding and capacity checks;
    `prefill.py`: a model fed every prompt token but the last (every decoder's and drafter's
    `init`).
  * `sampling.py`: warpers (temperature, top-k, top-p), one shared by target and draft;
    `categorical.py`: `sample_from_probs`, the exact two-level Gumbel-max sampler every draw
    uses (2 sqrt(V) Gumbels per row); `argmax.py`: `first_argmax`, a vectorised `jnp.argmax`.

Then four rooms, one concept per file (each room's `__init__` lists its files):
  * `rules/`: acceptance rules, a static `accept=` field of a decoder: `acceptance.py`
    (token-wise, `speculative_accept`), `block.py` (`block_accept`: keeps more drafts),
    `lossy.py` (lossy contrasts), `tree.py` (`tree_accept`), `_common.py` (their shared
    scaffolding); the registry by name is `rules/__init__.py` (`accept_rule("block")`).
  * `drafters/`: where proposals come from: `base.py` (the `Drafter` seam: `Proposal`,
    `Verdict`), `model.py` (`ModelDrafter`), `lookup.py` (`LookupDrafter`), `adaptive.py` and
    the γ policies of `gamma_policy.py`, `gamma_theory.py` (cost-model policies) and
    `gamma_parse.py` (by name) (adaptive γ: `SpeculativeDecoder(..., gamma_policy=...)`),
    `hierarchical.py` (`SpeculativeDrafter(SpeculativeDecoder(middle, small, ...))` as the draft
    of another decoder; its draft params are (middle_params, small_params)).
  * `trees/`: token trees: `topology.py` (`TokenTree`, `tree_inputs`), `drafter.py`
    (`TreeDrafter`), `eagle.py` (`EagleTreeDrafter`), `medusa.py` (`MedusaTreeDrafter`),
    `lookup.py` (`LookupTreeDrafter`),
    `search.py` (Sequoia's `optimal_tree`, `expected_accepted`); EAGLE-2's dynamic trees:
    `traced.py` (`TracedTree`, a per-row topology as data), `dynamic.py` (`DynamicTree`, the node
    selection), `eagle_dynamic.py` (`EagleDynamicTreeDrafter`).
  * `decoders/`: `autoregressive.py`, `speculative.py` (`SpeculativeDecoder` and the shared
    propose → score → verify → emit → commit step), `verify_width.py` (verification only as wide
    as the longest drafted row, `verify_widths="auto"`), `tree.py` (`TreeSpeculativeDecoder`),
    `beam.py` and `speculative_beam.py` (`BeamSearchDecoder`, and its speculative twin that
    replays the target's beam search along drafted beam paths; both return a `BeamResult`),
    `sharded.py` (`ShardedDecoder`: any decoder over a device mesh).
Imports point down: decoders use rules, drafters and trees; those use the top-level modules.
"""

from specjax.decoding.decoders.autoregressive import AutoregressiveDecoder
from specjax.decoding.decoders.beam import BeamResult, BeamSearchDecoder, BeamState
from specjax.decoding.decoders.sharded import ShardedDecoder
from specjax.decoding.decoders.speculative import LossyRuleWarning, SpeculativeDecoder
from specjax.decoding.decoders.speculative_beam import SpeculativeBeamDecoder
from specjax.decoding.decoders.tree import TreeSpeculativeDecoder
from specjax.decoding.drafters.adaptive import AdaptiveDrafter
from specjax.decoding.drafters.base import Drafter, Proposal, Verdict, reads_features
from specjax.decoding.drafters.eagle import EagleDrafter
from specjax.decoding.drafters.gamma_parse import COST_MODEL_POLICIES, parse_gamma_policy
from specjax.decoding.drafters.gamma_policy import ConfidenceGamma, FixedGamma, HeuristicGamma
from specjax.decoding.drafters.gamma_theory import PositionalGamma, TheoryGamma
from specjax.decoding.drafters.hierarchical import SpeculativeDrafter
from specjax.decoding.drafters.lookup import LookupDrafter
from specjax.decoding.drafters.medusa import MedusaDrafter
from specjax.decoding.drafters.model import ModelDrafter
from specjax.decoding.drafters.truncated import TruncatedDrafter
from specjax.decoding.loop import Decoder, LoopState, generate, stream
from specjax.decoding.rules._common import residual_distribution
from specjax.decoding.rules.acceptance import speculative_accept
from specjax.decoding.rules.block import block_accept
from specjax.decoding.rules.tree import tree_accept
from specjax.decoding.sampling import (
    Greedy,
    Temperature,
    TopK,
    TopP,
    Warper,
    make_warper,
    sample_from_probs,
)
from specjax.decoding.state import DecodeStats, GenerationResult, Sequences
from specjax.decoding.stats import raw_counts, summarize_stats
from specjax.decoding.trees.drafter import TreeDrafter
from specjax.decoding.trees.dynamic import DynamicTree
from specjax.decoding.trees.eagle import EagleTreeDrafter
from specjax.decoding.trees.eagle_dynamic import EagleDynamicTreeDrafter
from specjax.decoding.trees.lookup import LookupTreeDrafter
from specjax.decoding.trees.medusa import MedusaTreeDrafter
from specjax.decoding.trees.search import (
    expected_accepted,
    hardware_aware_tree,
    optimal_tree,
    positional_from_conditional,
)
from specjax.decoding.trees.topology import TokenTree
from specjax.decoding.trees.traced import TracedTree

__all__ = [
    "AdaptiveDrafter",
    "TruncatedDrafter",
    "COST_MODEL_POLICIES",
    "ConfidenceGamma",
    "FixedGamma",
    "HeuristicGamma",
    "PositionalGamma",
    "TheoryGamma",
    "parse_gamma_policy",
    "AutoregressiveDecoder",
    "BeamResult",
    "BeamSearchDecoder",
    "BeamState",
    "DecodeStats",
    "Decoder",
    "Drafter",
    "GenerationResult",
    "Greedy",
    "LookupDrafter",
    "LookupTreeDrafter",
    "LossyRuleWarning",
    "LoopState",
    "ModelDrafter",
    "EagleDrafter",
    "MedusaDrafter",
    "EagleTreeDrafter",
    "EagleDynamicTreeDrafter",
    "MedusaTreeDrafter",
    "DynamicTree",
    "reads_features",
    "Proposal",
    "Sequences",
    "ShardedDecoder",
    "SpeculativeBeamDecoder",
    "SpeculativeDecoder",
    "SpeculativeDrafter",
    "Temperature",
    "TokenTree",
    "TracedTree",
    "TopK",
    "TopP",
    "TreeDrafter",
    "TreeSpeculativeDecoder",
    "Verdict",
    "Warper",
    "block_accept",
    "expected_accepted",
    "generate",
    "hardware_aware_tree",
    "make_warper",
    "optimal_tree",
    "positional_from_conditional",
    "residual_distribution",
    "sample_from_probs",
    "speculative_accept",
    "stream",
    "raw_counts",
    "summarize_stats",
    "tree_accept",
]
