"""Feature heads passed as a decoder's draft: which drafter drafts with them, and their target.

A decoder given a head (`EagleHead`, `MedusaHeads`) rather than a model or a `Drafter` drafts
from it with its own warper, as it wraps a plain model in a `ModelDrafter`: `head_drafter`
picks the chain drafter. Token-tree decoders pick theirs (`trees/eagle.py`).
"""

from __future__ import annotations

from specjax.decoding.drafters.base import reads_features
from specjax.decoding.drafters.eagle import EagleDrafter
from specjax.decoding.drafters.medusa import MedusaDrafter
from specjax.models.eagle_head import EagleHead
from specjax.models.medusa_heads import MedusaHeads


def head_drafter(draft, warper):
    """The chain drafter for a feature head passed as `draft` (None: not a head)."""
    if isinstance(draft, EagleHead):
        return EagleDrafter(draft, warper)
    if isinstance(draft, MedusaHeads):
        return MedusaDrafter(draft, warper)
    return None


def check_feature_target(target, drafter) -> None:
    """ValueError unless a drafter that reads features reads them from `target`."""
    if reads_features(drafter) and getattr(drafter, "target", target) != target:
        raise ValueError(
            f"draft: the feature head was built for another target ({drafter.target!r}); its "
            f"features would come from this decoder's target {target!r}. Build the head for "
            "the target it drafts for (EagleHead(target), MedusaHeads(target))"
        )
