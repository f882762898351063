"""Decoding: the loop driver, decoders, drafters, acceptance rules and sampling warpers.

    from specjax.decoding import SpeculativeDecoder, make_warper

    decoder = SpeculativeDecoder(target, draft, gamma=4, warper=make_warper(temperature=1.0))
    result = decoder.generate(
        target_params, draft_params, prompts=prompts, key=key, max_new_tokens=64
    )

Every decoder is called alike: its models' params first (target, then draft), then keywords
(`loop.py`'s docstring; the older positional forms are the same signatures).

The seams (see each module's docstring):
  * `loop.py`: one driver (`generate`, `stream`, the jitted programs) for any decoder that offers
    `models`, `init` and `step`; `LoopState` is every decoder's loop state.
  * `drafters.py`: where proposals come from (`Drafter`: `ModelDrafter`, `LookupDrafter`).
  * `tree.py`, `tree_decoder.py`: token trees (`TokenTree`, `tree_accept`) verified in one target
    call by `TreeSpeculativeDecoder`, drafted by a model (`TreeDrafter`) or by prompt lookup
    (`lookup_tree.py`: `LookupTreeDrafter`); `tree_search.py`: Sequoia's optimal tree for a
    measured acceptance-by-rank vector (`optimal_tree`, `expected_accepted`).
  * `gamma_policy.py`, `drafters/adaptive.py`: adaptive γ (`SpeculativeDecoder(...,
    gamma_policy=HeuristicGamma())`): per-row draft lengths chosen by a policy, drafted in a
    loop that stops once every row has stopped; `verify_width.py`: verification only as wide
    as the longest drafted row (`verify_widths="auto"`).
  * `hierarchical.py`: hierarchical speculation: `SpeculativeDrafter(SpeculativeDecoder(middle,
    small, ...))` is the draft of another decoder (target <- middle <- small, any depth); the
    draft params are then the inner decoder's params as a tuple, (middle_params, small_params).
  * `acceptance.py`: the verification rule, a static `accept=` field of `SpeculativeDecoder`;
    `block.py`: block verification (`block_accept`), a drop-in rule that keeps more drafts.
  * `beam.py`, `speculative_beam.py`: beam search (`BeamSearchDecoder`) and its speculative
    twin (`SpeculativeBeamDecoder`: the target's beam search replayed along drafted beam paths,
    same hypotheses and scores); both return a `BeamResult`.
  * `sampling.py`: warpers (temperature, top-k, top-p), one shared by target and draft;
    `categorical.py`: `sample_from_probs`, the exact two-level Gumbel-max sampler every draw
    uses (2 sqrt(V) Gumbels per row); `argmax.py`: `first_argmax`, a vectorised `jnp.argmax`.
"""

from specjax.decoding.decoders.autoregressive import AutoregressiveDecoder
from specjax.decoding.decoders.beam import BeamResult, BeamSearchDecoder, BeamState
from specjax.decoding.decoders.sharded import ShardedDecoder
from specjax.decoding.decoders.speculative import LossyRuleWarning, SpeculativeDecoder
from specjax.decoding.decoders.speculative_beam import SpeculativeBeamDecoder
from specjax.decoding.decoders.tree import TreeSpeculativeDecoder
from specjax.decoding.drafters.adaptive import AdaptiveDrafter
from specjax.decoding.drafters.base import Drafter, Proposal, Verdict
from specjax.decoding.drafters.gamma_policy import (
    ConfidenceGamma,
    FixedGamma,
    HeuristicGamma,
    TheoryGamma,
    parse_gamma_policy,
)
from specjax.decoding.drafters.hierarchical import SpeculativeDrafter
from specjax.decoding.drafters.lookup import LookupDrafter
from specjax.decoding.drafters.model import ModelDrafter
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
from specjax.decoding.stats import summarize_stats
from specjax.decoding.trees.drafter import TreeDrafter
from specjax.decoding.trees.lookup import LookupTreeDrafter
from specjax.decoding.trees.search import (
    expected_accepted,
    hardware_aware_tree,
    optimal_tree,
    positional_from_conditional,
)
from specjax.decoding.trees.topology import TokenTree

__all__ = [
    "AdaptiveDrafter",
    "ConfidenceGamma",
    "FixedGamma",
    "HeuristicGamma",
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
    "Proposal",
    "Sequences",
    "ShardedDecoder",
    "SpeculativeBeamDecoder",
    "SpeculativeDecoder",
    "SpeculativeDrafter",
    "Temperature",
    "TokenTree",
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
    "summarize_stats",
    "tree_accept",
]
