"""Moved to `specjax.training.sharded`; this module re-exports its public names."""

from specjax.training.sharded import (
    shard_eval_step,
    shard_train_step,
    train_state_shardings,
)

__all__ = ["shard_eval_step", "shard_train_step", "train_state_shardings"]
