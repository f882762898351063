"""Self-distillation data for feature heads: the target's replies and its hidden states.

A feature head (EAGLE style) learns to predict the target's next hidden state from the current
one and the next token. Its data is the target's own text, as Medusa-2 and EAGLE-3 regenerate it:
  1. `generate_replies`: the target decodes replies to training prompts, in large batches
     (batch-1 decoding is the cost; a batch of 32 streams the weights once for 32 rows);
  2. `score_features`: one forward pass per batch of finished sequences gives the final hidden
     state at every position, [T, embed] per sequence;
  3. `FeatureData`: tokens, features and a loss mask (reply positions), saved as one .npz with a
     fingerprint of everything it was built from (target params, prompts, settings), so a cache
     built for another target or other prompts is never reused by mistake.

The target's distribution at a position is head(feature), so the 2.3 KB/token features (embed
576, float32) stand in for the 196 KB/token distributions (vocab 49152).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import time
import zipfile

import jax
import jax.numpy as jnp
import numpy as np

from specjax.decoding import AutoregressiveDecoder, make_warper
from specjax.decoding.prefill import target_features
from specjax.decoding.prompts import bucket_length


def params_fingerprint(params) -> str:
    """sha256 (16 hex digits) of every parameter's path, shape, dtype and bytes."""
    h = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_leaves_with_path(params):
        arr = np.asarray(jax.device_get(leaf))
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str((arr.shape, arr.dtype)).encode())
        h.update(arr.tobytes())
    return h.hexdigest()[:16]


def generate_replies(
    model,
    params,
    prompt_ids,
    *,
    max_new_tokens: int,
    temperature: float,
    seed: int,
    eos_id: int | None,
    batch_size: int = 32,
    cache_len: int = 512,
    log=None,
) -> list[np.ndarray]:
    """The target's replies to each prompt: int32 arrays of prompt + reply tokens.

    Args:
      model, params: the target.
      prompt_ids: list of 1-D int token arrays (chat-templated prompts).
      max_new_tokens: reply budget per prompt.
      temperature: 0 (greedy) or > 0.
      seed: PRNG seed (batch i uses fold_in(seed, i)).
      eos_id: stop a row at this token (None: never).
      batch_size: prompts decoded together.
      cache_len: positions per row (prompt + reply must fit).
      log: optional callable(str) for progress lines.
    """
    too_long = [i for i, p in enumerate(prompt_ids) if len(p) + max_new_tokens > cache_len]
    if too_long:
        raise ValueError(
            f"prompt_ids {too_long[:5]} are too long for cache_len={cache_len} with "
            f"max_new_tokens={max_new_tokens}"
        )
    # Every batch padded to one prompt width: one program (a compile is 20-40 s on a GPU).
    bucket = min(bucket_length(max(len(p) for p in prompt_ids)), cache_len)
    decoder = AutoregressiveDecoder(
        model, make_warper(temperature), cache_len=cache_len, min_bucket=bucket
    )
    key = jax.random.PRNGKey(seed)
    out = []
    start = time.perf_counter()
    for i in range(0, len(prompt_ids), batch_size):
        chunk = list(prompt_ids[i : i + batch_size])
        pad = batch_size - len(chunk)
        chunk = chunk + [chunk[-1]] * pad  # one compiled batch size
        res = decoder.generate(
            params,
            prompts=chunk,
            key=jax.random.fold_in(key, i // batch_size),
            max_new_tokens=max_new_tokens,
            eos_id=eos_id,
        )
        tokens, lengths = jax.device_get((res.tokens, res.lengths))
        for b in range(batch_size - pad):
            out.append(np.asarray(tokens[b, : int(lengths[b])], np.int32))
        if log is not None:
            done = len(out)
            rate = sum(len(s) for s in out) / (time.perf_counter() - start)
            log(f"replies {done}/{len(prompt_ids)} ({rate:.0f} tokens/s incl. prompts)")
    return out


def score_features(model, params, sequences, *, batch_size: int = 8, layers: tuple = (), log=None):
    """The target's final hidden state at every position of each sequence: float32 [T, embed].

    Sequences are scored in batches padded to the batch's longest, rounded up to a power of
    two (at least 64), so few programs compile; one forward call per batch.

    With `layers` (EAGLE-3's blocks), returns (hidden list, layer features list): the latter
    float32 [T, len(layers) * embed], the residual streams after those blocks, concatenated
    (`decoding.prefill.target_features`, what the drafter reads).
    """

    def run(p, tokens, n):
        state = model.init_state(tokens.shape[0], tokens.shape[1])
        out = model.forward(p, state, tokens, n, return_layers=layers)
        return out.hidden, (target_features(out, layers) if layers else out.hidden[..., :0])

    forward = jax.jit(run)
    out, out_layers = [], []
    for i in range(0, len(sequences), batch_size):
        chunk = sequences[i : i + batch_size]
        width = bucket_length(max(len(s) for s in chunk), 64)
        tokens = np.zeros((batch_size, width), np.int32)
        lengths = np.zeros((batch_size,), np.int32)
        for b, s in enumerate(chunk):
            tokens[b, : len(s)] = s
            lengths[b] = len(s)
        hidden, lays = jax.device_get(forward(params, jnp.asarray(tokens), jnp.asarray(lengths)))
        out.extend(np.asarray(hidden[b, : len(s)], np.float32) for b, s in enumerate(chunk))
        out_layers.extend(np.asarray(lays[b, : len(s)], np.float32) for b, s in enumerate(chunk))
        if log is not None:
            log(f"features {len(out)}/{len(sequences)}")
    return (out, out_layers) if layers else out


@dataclasses.dataclass
class FeatureData:
    """Concatenated training sequences for a feature head.

    Attributes:
      tokens: int32 [N] every sequence's tokens, one after another.
      features: float32 [N, embed] the target's final hidden state after each token.
      loss_mask: bool [N] positions whose *next* token is a reply token (trained on).
      offsets: int64 [S + 1] sequence s is [offsets[s], offsets[s + 1]).
      meta: what it was built from (fingerprint, counts, seconds; "feature_layers" when
        `layers` is set).
      layers: None, or float32 [N, len(feature_layers) * embed] the residual streams after an
        EAGLE-3 head's target blocks (what it reads; `features` stay its labels' source).
    """

    tokens: np.ndarray
    features: np.ndarray
    loss_mask: np.ndarray
    offsets: np.ndarray
    meta: dict
    layers: np.ndarray | None = None

    @classmethod
    def build(cls, sequences, prompt_lengths, features, meta, layers=None) -> FeatureData:
        """From per-sequence tokens, prompt lengths, features [T, embed] and optionally the
        layer features [T, F] (`score_features(..., layers=...)`)."""
        lengths = [len(s) for s in sequences]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        mask = np.zeros((offsets[-1],), bool)
        for s, p in enumerate(prompt_lengths):
            # position t predicts token t + 1: train where t + 1 is a reply token.
            mask[offsets[s] + p - 1 : offsets[s + 1] - 1] = True
        return cls(
            np.concatenate(sequences).astype(np.int32),
            np.concatenate(features).astype(np.float32),
            mask,
            offsets,
            dict(meta),
            None if layers is None else np.concatenate(layers).astype(np.float32),
        )

    def save(self, path: str) -> None:
        """Writes one .npz (atomically: a temporary file renamed into place)."""
        tmp = path + ".tmp.npz"
        np.savez(
            tmp,
            tokens=self.tokens,
            features=self.features,
            loss_mask=self.loss_mask,
            offsets=self.offsets,
            meta=np.frombuffer(json.dumps(self.meta).encode(), np.uint8),
            **({} if self.layers is None else {"layers": self.layers}),
        )
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str, fingerprint: str | None = None) -> FeatureData:
        """Reads a saved .npz; raises ValueError if it is corrupt or built from something else."""
        try:
            with np.load(path) as z:
                data = cls(
                    z["tokens"], z["features"], z["loss_mask"], z["offsets"],
                    json.loads(bytes(z["meta"]).decode()),
                    z["layers"] if "layers" in z.files else None,
                )  # fmt: skip
        except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile) as e:
            raise ValueError(
                f"feature cache {path!r} is unreadable or corrupt ({e}); delete it"
            ) from e
        n = data.tokens.shape[0]
        rows = [data.features.shape[0], data.loss_mask.shape[0], int(data.offsets[-1])]
        if data.layers is not None:
            rows.append(data.layers.shape[0])
        if any(r != n for r in rows):
            raise ValueError(f"feature cache {path!r} is inconsistent (lengths differ); delete it")
        if fingerprint is not None and data.meta.get("fingerprint") != fingerprint:
            raise ValueError(
                f"feature cache {path!r} was built from other data (fingerprint "
                f"{data.meta.get('fingerprint')!r}, expected {fingerprint!r}); delete it or use "
                "another cache path"
            )
        return data

    @property
    def num_sequences(self) -> int:
        return len(self.offsets) - 1
