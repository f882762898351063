"""Speculative beam search: the target's beam search replayed along drafted beam paths.

Each iteration, for every batch row:
  1. propose: the drafter extends each of the B live beams, in the same batch·B row layout as
     the beams: by its greedy chain of γ tokens (`ModelDrafter` with the greedy warper, or any
     chain `Drafter`), or by a token tree (`tree=`: `TreeDrafter` with the draft's top-k
     children, e.g. `TokenTree.from_branching((2, 1, 1))`: two first tokens, then chains);
  2. score: the target scores [last, drafted nodes] of every beam in one call ([batch·B, N],
     a tree with `tree_inputs`' positions and ancestor mask), giving its log-probabilities
     after each beam followed by the path to each node;
  3. replay: the ordinary beam-search step (`BeamSteps.select`) runs on those log-probabilities,
     step after step, for as long as every live beam it selects is a drafted node: beam j of
     the new set is a child node (with its token) of its parent's node on the parent's row.
     The first step only needs the roots' distributions, which every row has; the step that
     leaves the drafted nodes is still computed from the target's own distributions, so each
     iteration takes 1..depth+1 exact beam-search steps;
  4. commit: every model state takes the rows its new beams descend from (`gather_rows`),
     moves the path to each beam's last node into place (the state's `select`, for trees) and
     rolls back to what the beams contain (target: length L - 1 + m after m steps; the
     drafter's `commit` with m - 1 accepted tokens and that path).
Every selection is `select` on the target's log-probabilities for the beams as they are, so
the finished hypotheses, their scores and early stopping equal `BeamSearchDecoder`'s. The one
difference is float32 roundoff: the target's logits for a prefix come from a call over N new
tokens instead of one, so scores agree to ~1e-6 (tests allow 1e-4 absolute), and tokens are
identical unless two candidates tie to within that roundoff (as for greedy speculative
decoding).

Why greedy chains or small top-k trees below each live beam, and not the draft's own beam
search: each target row is a live beam's own cache row, so what it scores must be rooted at
that beam. A draft beam search's B paths may share roots and leave other live beams with
nothing, and the first replayed step needs every live beam's distribution anyway (which
position 0 of each row gives). A greedy chain is the path a beam's best child starts, what the
target keeps when its beams do not branch; it cannot follow a step where the target keeps two
children of one beam, which is common (on the mini python pair a chain accepts almost nothing
at B = 4). A tree with k first tokens per beam follows such steps (then the iteration ends at
the first step no node covers).

The loop is `loop.py`'s `LoopState` and `beam.py`'s jitted `while_loop`: beam decoders return
their finished hypotheses, not a `GenerationResult`, so they share the driver's pieces
(`prepare`, params checks, `running`) but not its `generate`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding.arguments import resolve_cache_len
from specjax.decoding.decoders.beam import (
    BeamSteps,
    count_step,
    flat_index,
    gather_rows,
    generate_beams,
)
from specjax.decoding.drafters.base import Verdict, check_gamma, is_drafter, proposal_nan
from specjax.decoding.drafters.model import ModelDrafter
from specjax.decoding.loop import LoopState
from specjax.decoding.sampling import make_warper
from specjax.decoding.state import last_tokens
from specjax.decoding.trees.drafter import TreeDrafter, check_top_k_children
from specjax.decoding.trees.topology import TokenTree, tree_inputs
from specjax.models.interface import check_vocab
from specjax.models.kv_cache import rollback


def path_table(tree: TokenTree) -> np.ndarray:
    """int32 [N, max_depth + 1]: each node's path from the root (root first), padded with it."""
    table = np.zeros((tree.num_nodes, tree.max_depth + 1), np.int32)
    for node in range(tree.num_nodes):
        path, x = [], node
        while x >= 0:
            path.append(x)
            x = tree.parents[x]
        table[node, : len(path)] = path[::-1]
        table[node, len(path) :] = node
    return table


@dataclasses.dataclass(frozen=True)
class SpeculativeBeamDecoder(BeamSteps):
    """Beam search over `target`, several exact steps per target call (module docstring).

    Attributes:
      target: any specjax model.
      draft: a model (drafted greedily: `ModelDrafter`, or `TreeDrafter` with top-k children
        for a branching `tree`) or a `Drafter`.
      gamma: drafted tokens per beam and iteration (static, >= 1); with a `tree`, its
        num_nodes - 1.
      num_beams: beam width B >= 1 (static).
      length_penalty: as `BeamSearchDecoder`'s.
      tree: None (a chain of gamma tokens per beam) or a `TokenTree` drafted below each beam.
      cache_len: positions per row (None: the models' position limit, else 512).
      min_bucket: smallest padded prompt width.
    """

    target: Any
    draft: Any
    gamma: int = 4
    num_beams: int = 4
    length_penalty: float = 1.0
    tree: TokenTree | None = None
    cache_len: int | None = None
    min_bucket: int = 16

    def __post_init__(self):
        self.check_beam_fields()
        if self.tree is not None:
            if not isinstance(self.tree, TokenTree) or self.tree.max_depth < 1:
                raise ValueError(f"tree must be a TokenTree below its root; got {self.tree!r}")
            nodes = self.tree.num_nodes - 1
            if self.gamma not in (nodes, type(self).gamma):  # left at its default: follows tree
                raise ValueError(
                    f"gamma={self.gamma!r} contradicts tree (its {nodes} drafted nodes); with a "
                    "tree, leave gamma unset"
                )
            object.__setattr__(self, "gamma", nodes)
        if isinstance(self.gamma, bool) or not isinstance(self.gamma, int) or self.gamma < 1:
            raise ValueError(f"gamma must be an integer >= 1; got {self.gamma!r}")
        check_vocab(self.target, self.draft)
        if self.branching and not is_drafter(self.draft):  # the draft's own top-k tree
            check_top_k_children(self.topology, self.draft.vocab_size, "speculative beam search")
        check_gamma(self.drafter, self.gamma)
        resolve_cache_len(self)

    @property
    def topology(self) -> TokenTree:
        """The drafted tree below each beam (a chain of gamma without `tree`)."""
        return TokenTree.chain(self.gamma) if self.tree is None else self.tree

    @property
    def branching(self) -> bool:
        return self.topology.max_branch > 1

    @property
    def drafter(self):
        """The proposer: the draft if it is a `Drafter`, else its greedy chain or top-k tree."""
        if is_drafter(self.draft):
            return self.draft
        if self.branching:
            return TreeDrafter(self.draft, make_warper(0), self.topology)
        return ModelDrafter(self.draft, make_warper(0))

    @property
    def models(self) -> tuple:
        return (self.target, self.drafter.model)

    @property
    def lookahead(self) -> int:
        return self.gamma

    @property
    def tokens_per_step(self) -> int:
        return self.topology.max_depth + 1

    def init(self, params, prompts, prompt_lengths, key, max_new_tokens, eos_id) -> LoopState:
        """Prefills target and drafter (every prompt token but the last), once per beam."""
        target_params, draft_params = params
        t_state = self.prefill(self.target, target_params, prompts, prompt_lengths)
        d_state = self.drafter.init(draft_params, prompts, prompt_lengths, self.cache_len)
        d_state = jax.tree.map(lambda x: jnp.repeat(x, self.num_beams, axis=0), d_state)
        return self.new_beam_state(
            prompts, prompt_lengths, key, max_new_tokens, eos_id, (t_state, d_state), self.gamma
        )

    def propose_and_score(self, params, s: LoopState, t_state, d_state):
        """Drafts below every beam and scores all nodes with one target call.

        Returns:
          (proposal, node tokens int32 [batch·B, N] (-1: root or not drafted), target logits
          [batch·B, N, vocab], target state).
        """
        target_params, draft_params = params
        tree, n = self.topology, self.gamma + 1
        active = jnp.repeat(~s.extra.done, self.num_beams)  # [batch·B]
        key = jax.random.fold_in(s.key, s.step)
        proposal = self.drafter.propose(draft_params, d_state, s.seq, key, self.gamma)
        drafted = proposal.tokens  # [batch·B, N - 1]
        if proposal.num_drafted is not None:  # a row drafted fewer: its later nodes never match
            slot = jnp.arange(self.gamma)[None, :]
            drafted = jnp.where(slot < proposal.num_drafted[:, None], drafted, -1)
        if proposal.valid is not None:
            drafted = jnp.where(proposal.valid, drafted, -1)
        fed = jnp.concatenate([last_tokens(s.seq, 1), jnp.maximum(drafted, 0)], axis=1)
        positions = mask = None
        if self.branching:
            positions, mask = tree_inputs(tree, s.seq.lengths - 1, self.cache_len)
        logits, t_state = self.target.apply(
            target_params,
            t_state,
            fed,
            active.astype(jnp.int32) * n,
            positions=positions,
            mask=mask,
        )  # [batch·B, N, vocab]
        nodes = jnp.concatenate([jnp.full_like(drafted[:, :1], -1), drafted], axis=1)
        return proposal, nodes, logits, t_state

    def step(self, params, s: LoopState) -> LoopState:
        """Propose, score, replay, commit (module docstring) for every row (jittable)."""
        t_state, d_state = s.model_states
        beams, n = self.num_beams, self.gamma + 1
        batch = s.extra.done.shape[0]
        going = ~s.extra.done  # [batch]
        proposal, nodes, logits, t_state = self.propose_and_score(params, s, t_state, d_state)
        logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
        logp = logp.reshape(batch, beams * n, -1)  # [batch, B·N, vocab]: row-major (row, node)
        nodes = nodes.reshape(batch, beams * n)  # [batch, B·N]
        kids_of = jnp.asarray(self.topology.child_slots())  # [N, max_branch], -1 padded
        lengths_before = s.seq.lengths  # [batch·B]

        def replay(carry):
            s, row, node, last_node, go, steps = carry
            # [batch, B, vocab]: the target after each live beam (node `node` of row `row`)
            here = jnp.take_along_axis(logp, (row * n + node)[:, :, None], axis=1)
            s, parent, token = self.select(s, here, go)
            prow = jnp.take_along_axis(row, parent, axis=1)  # [batch, B]
            pnode = jnp.take_along_axis(node, parent, axis=1)
            kids = kids_of[pnode]  # [batch, B, max_branch]
            kid_tokens = jnp.take_along_axis(
                nodes[:, None, :], (prow[:, :, None] * n + jnp.maximum(kids, 0)), axis=2
            )
            hit = (kid_tokens == token[:, :, None]) & (kids >= 0)  # [batch, B, max_branch]
            child = jnp.take_along_axis(kids, jnp.argmax(hit, axis=2)[:, :, None], axis=2)[..., 0]
            moved = go[:, None]
            row = jnp.where(moved, prow, row)
            last_node = jnp.where(moved, pnode, last_node)
            node = jnp.where(moved, child, node)
            steps = steps + go.astype(jnp.int32)
            go = go & jnp.all(hit.any(axis=2), axis=1) & ~s.extra.done
            return s, row, node, last_node, go, steps

        # A while loop: replaying stops once every row has left its drafted trees.
        zeros = jnp.zeros((batch, beams), jnp.int32)
        row0 = jnp.broadcast_to(jnp.arange(beams)[None, :], (batch, beams))
        carry = (s, row0, zeros, zeros, going, jnp.zeros((batch,), jnp.int32))
        s, row, _, last_node, _, steps = jax.lax.while_loop(lambda c: jnp.any(c[4]), replay, carry)

        # Each new beam = its row's beam + the path to `last_node` + the last selected token.
        index = flat_index(row)  # [batch·B] each new beam's row before the step
        flat_steps = jnp.repeat(steps, beams)  # [batch·B]
        path = jnp.asarray(path_table(self.topology))[last_node.reshape(-1)]  # [batch·B, D + 1]
        t_state = gather_rows(t_state, index)
        if self.branching:
            t_state = t_state.select(lengths_before - 1, path)
        t_state = rollback(t_state, lengths_before - 1 + flat_steps)
        d_state = gather_rows(proposal.state, index)
        flat_active = jnp.repeat(going, beams)
        accepted = jnp.maximum(flat_steps - 1, 0)
        verdict = Verdict(lengths_before, accepted, flat_active, path if self.branching else None)
        d_state = self.drafter.commit(d_state, verdict)
        stats = count_step(s.stats, going, beams, steps, logits, proposal_nan(proposal))
        stats = stats.replace(draft_calls=stats.draft_calls + proposal.calls)
        return s.replace(step=s.step + 1, model_states=(t_state, d_state), stats=stats)

    def generate(
        self, target_params, draft_params, prompts, key=None, max_new_tokens=16, eos_id=None
    ):
        """Speculative beam search for every prompt in one jitted call; returns a BeamResult.

        Args:
          target_params, draft_params: the two models' params.
          prompts: list of 1-D token sequences (ragged), or int [batch, P].
          key: PRNG key for a sampling drafter (None: a fixed key; greedy drafts ignore it).
          max_new_tokens: >= 1; traced, so new values do not recompile.
          eos_id: a hypothesis ends at this token (None: never).
        """
        return generate_beams(
            self, (target_params, draft_params), prompts, max_new_tokens, eos_id, key
        )
