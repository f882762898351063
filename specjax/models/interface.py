"""The interface every specjax model offers to the decoding loops, and pair checks.

A model is a small frozen (hashable) object, usable as a static `jax.jit` argument, with:
    vocab_size: int
    init_state(batch, max_len) -> state      # a pytree with an int32 `lengths` [batch] field
    apply(params, state, tokens, num_new) -> (logits, state)
        tokens  int32 [batch, T]   row b's tokens[b, :num_new[b]] are real, the rest padding
        num_new int32 [batch]
        logits  float32 [batch, T, vocab]  next-token logits after each fed token
Rollback is `state.replace(lengths=...)`. Transformers, n-gram tables, the uniform draft and
prompt lookup all follow it, so any draft pairs with any target.
"""

from __future__ import annotations

from typing import Any, Protocol


class LanguageModel(Protocol):
    """Structural type of a decodable model (see the module docstring)."""

    vocab_size: int

    def init_state(self, batch: int, max_len: int) -> Any: ...

    def apply(self, params, state, tokens, num_new): ...


def check_pair(target: LanguageModel, draft: LanguageModel) -> None:
    """Raises ValueError unless target and draft can be paired for speculative decoding."""
    for name, model in (("target", target), ("draft", draft)):
        for attr in ("vocab_size", "init_state", "apply"):
            if not hasattr(model, attr):
                raise TypeError(f"{name} model {model!r} lacks `{attr}` (see models/interface.py)")
    if target.vocab_size != draft.vocab_size:
        raise ValueError(
            f"vocab mismatch: target has vocab_size={target.vocab_size} but draft has "
            f"vocab_size={draft.vocab_size}; speculative decoding needs one shared tokenizer "
            "(token i must mean the same string to both models)"
        )
