"""experiments/real/head_trees.py on a tiny target and an EAGLE-3 head: the rule per temperature,
chain predictions by the closed form, Sequoia's trees optimal among the candidates of their size
under the measure they were built for, and trees printed in a notation `--trees` parses back."""

import jax
import numpy as np
import pytest

from experiments.common.real_drafts import tree_text
from experiments.real.head_trees import format_head_trees, head_trees_table
from specjax.decoding import TokenTree
from specjax.models import EagleHead
from specjax.testing import tiny_llama


@pytest.mark.parametrize("temperature, rule", [(0.0, "top_k"), (1.0, "without")])
def test_head_trees_table(temperature, rule):
    target, tp = tiny_llama(23, 2)
    head = EagleHead(target, feature_layers=(0, 1))
    hp = head.with_target_columns(head.init_params(jax.random.PRNGKey(9)), tp)
    hp = jax.tree.map(lambda x: x * 3.0 if x.ndim == 2 else x, hp)
    prompts = [np.array([3, 5, 7, 2], np.int32), np.array([9, 1, 4], np.int32)]
    given = TokenTree.from_branching((2, 1))
    table = head_trees_table(
        target, tp, prompts, {"h": (head, hp)}, temperature=temperature, max_new_tokens=10,
        ranks=3, depth=3, sizes=(4, 6), trees=[given],
    )  # fmt: skip
    assert table["rule"] == rule and table["prompts"] == 2 and table["new_tokens"] == 20
    h = table["heads"]["h"]
    rows = np.asarray(h["positional"])
    assert rows.shape == (3, 3) and (rows.sum(1) <= 1 + 1e-6).all()
    trees = {tr["name"]: tr for tr in h["trees"]}
    for g in (1, 2, 3):  # a chain: 1 + sum_d prod_{j < d} P[j][0]
        want = 1 + sum(np.prod(rows[:d, 0]) for d in range(1, g + 1))
        assert trees[f"chain γ = {g}"]["tokens_by_depth"] == pytest.approx(want)
        assert trees[f"chain γ = {g}"]["tokens_by_vector"] == pytest.approx(
            1 + sum(rows[0, 0] ** d for d in range(1, g + 1))
        )
    for n in (4, 6):  # each DP tree is the best of its size for the measure it was built for
        same = [tr for tr in h["trees"] if tr["nodes"] == n]
        by_depth = trees[f"Sequoia by depth, {n} nodes"]
        by_vector = trees[f"Sequoia one vector, {n} nodes"]
        assert all(by_depth["tokens_by_depth"] >= tr["tokens_by_depth"] - 1e-12 for tr in same)
        assert all(by_vector["tokens_by_vector"] >= tr["tokens_by_vector"] - 1e-12 for tr in same)
    assert trees[f"given {tree_text(given)}"]["nodes"] == given.num_nodes
    for tr in h["trees"]:  # the printed notation is what --trees parses
        tree = TokenTree.parse(tr["tree"])
        assert (tree.num_nodes, tree.max_depth) == (tr["nodes"], tr["depth"])
    text = format_head_trees(table)
    assert text.count("| chain γ =") == 3 and "Sequoia by depth, 6 nodes" in text


def test_time_trees_picks_the_fastest_predicted_on_measured_iterations(monkeypatch):
    # The timing itself is replaced by a fixed cost per program (AR 10 ms, a chain of n nodes
    # 10 + n ms, a tree of n nodes 10 + 2n ms): what is checked is the bookkeeping, the decoder
    # each row runs, the prediction and the pick.
    import types

    from experiments.real import head_trees
    from specjax.decoding import SpeculativeDecoder, TreeSpeculativeDecoder

    target, tp = tiny_llama(23, 2)
    head = EagleHead(target, feature_layers=(0, 1))
    hp = head.with_target_columns(head.init_params(jax.random.PRNGKey(9)), tp)
    prompts = [np.array([3, 5, 7, 2], np.int32)]
    table = head_trees_table(
        target, tp, prompts, {"h": (head, hp)}, temperature=0.0, max_new_tokens=8,
        ranks=2, depth=2, sizes=(4,),
    )  # fmt: skip
    timed = []

    def fake_cost(decoder, params, prompts, *, steps, repeats):
        if isinstance(decoder, TreeSpeculativeDecoder):
            ms = 10 + 2 * decoder.tree.num_nodes
        elif isinstance(decoder, SpeculativeDecoder):
            ms = 10 + decoder.gamma + 1
        else:
            ms = 10
        timed.append(ms)
        return types.SimpleNamespace(samples=(ms / 1e3,) * repeats)

    monkeypatch.setattr(head_trees, "iteration_cost", fake_cost)
    table = head_trees.time_trees(
        table, target, tp, {"h": (head, hp)}, prompts[0], rounds=2, cache_len=32
    )
    rows = table["heads"]["h"]["trees"]
    distinct = {tr["tree"] for tr in rows}
    assert len(timed) == 2 * (1 + len(distinct))  # AR and each distinct tree, per round
    assert table["ar_iteration_ms"] == pytest.approx(10)
    for tr in rows:
        tree = TokenTree.parse(tr["tree"])
        want = 10 + (1 if tree.max_branch == 1 else 2) * tree.num_nodes
        assert tr["iteration_ms"] == pytest.approx(want)
        assert tr["predicted_speedup"] == pytest.approx(tr["tokens_by_depth"] * 10 / want)
    best = max(rows, key=lambda tr: tr["predicted_speedup"])
    assert table["heads"]["h"]["best"] == best["name"]
    text = format_head_trees(table)
    assert text.count("(best)") == 1 and "AR: 10.0 ms / iteration" in text
