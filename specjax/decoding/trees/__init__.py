"""Token trees: the topology, the drafters that propose trees, and the search for a good tree.

`topology.py` is the static tree (`TokenTree`), the positions and mask that score its nodes in
one target call (`tree_inputs`) and how children are drawn (`draw_children`). Drafters:
`drafter.py` drafts a tree with a model (`TreeDrafter`), `eagle.py` with an EAGLE-1 feature
head (`EagleTreeDrafter`), `medusa.py` with Medusa heads (`MedusaTreeDrafter`, one call),
`lookup.py` with prompt lookup (`LookupTreeDrafter`). EAGLE-2's
dynamic trees, chosen per row from the head's scores: `traced.py` (`TracedTree`, the per-row
topology the rule and the decoder take as data), `dynamic.py` (`DynamicTree`, the budget, and
`select_nodes`), `eagle_dynamic.py` (`EagleDynamicTreeDrafter`). `search.py`
finds Sequoia's optimal tree for a measured acceptance-by-rank vector (`optimal_tree`,
`hardware_aware_tree`). The tree's acceptance rule is `specjax/decoding/rules/tree.py`
(`tree_accept`) and its decoder `specjax/decoding/decoders/tree.py` (`TreeSpeculativeDecoder`).
Callers import from `specjax.decoding`.
"""
