"""Moved to `specjax.training.distill`; this module re-exports its public names."""

from specjax.training.distill import (
    OBJECTIVES,
    distill_loss,
    divergence,
    make_distill_step,
)

__all__ = ["OBJECTIVES", "distill_loss", "divergence", "make_distill_step"]
