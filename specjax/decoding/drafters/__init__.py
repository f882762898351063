"""Drafters: where proposals come from (the `Drafter` seam of a speculative decoder).

`base.py` is the protocol (`Drafter`, `Proposal`, `Verdict`, `NoState`); each other file is one
drafter: `model.py` (`ModelDrafter`), `lookup.py` (`LookupDrafter`), `adaptive.py`
(`AdaptiveDrafter`, per-row γ chosen by a policy of `gamma_policy.py` or, priced by
measured costs, `gamma_theory.py`; `gamma_parse.py` reads one by name), `hierarchical.py`
(`SpeculativeDrafter`, a speculative decoder as the draft of another) and `eagle.py`
(`EagleDrafter`, an EAGLE-1 feature head that reads the target's hidden states), `medusa.py`
(`MedusaDrafter`: K heads on the target's last feature); `feature_heads.py` picks the drafter
of a head passed as a decoder's draft. A new drafter is one new file here, implementing
`base.Drafter`; token-tree drafters live in `specjax/decoding/trees/`. Callers import from
`specjax.decoding`.
"""
