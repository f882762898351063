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
    # Prompts sorted by length, so a batch pads to its own longest (a power of two): prefill is
    # a large share of a batch's work, and one program per width bucket compiles.
    order = sorted(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    decoder = AutoregressiveDecoder(
        model, make_warper(temperature), cache_len=cache_len, min_bucket=min(64, cache_len)
    )
    key = jax.random.PRNGKey(seed)
    out = [None] * len(prompt_ids)
    done = total = 0
    start = time.perf_counter()
    for i in range(0, len(order), batch_size):
        rows = order[i : i + batch_size]
        chunk = [prompt_ids[r] for r in rows]
        chunk += [chunk[-1]] * (batch_size - len(rows))  # one compiled batch size
        res = decoder.generate(
            params,
            prompts=chunk,
            key=jax.random.fold_in(key, i // batch_size),
            max_new_tokens=max_new_tokens,
            eos_id=eos_id,
        )
        tokens, lengths = jax.device_get((res.tokens, res.lengths))
        for b, r in enumerate(rows):
            out[r] = np.asarray(tokens[b, : int(lengths[b])], np.int32)
            total += len(out[r])
        done += len(rows)
        if log is not None:
            rate = total / (time.perf_counter() - start)
            log(f"replies {done}/{len(prompt_ids)} ({rate:.0f} tokens/s incl. prompts)")
    return out


def score_features(model, params, sequences, *, batch_size: int = 8, layers: tuple = (), log=None):
    """The target's final hidden state at every position of each sequence: float32 [T, embed].

    With `layers` (EAGLE-3's blocks), returns (hidden list, layer features list): the latter
    [T, len(layers) * embed], the residual streams after those blocks, concatenated
    (`decoding.prefill.target_features`, what the drafter reads). The arrays are float32
    views of `score_concatenated`'s.
    """
    hidden, lays = score_concatenated(
        model, params, sequences, batch_size=batch_size, layers=layers, layer_dtype=np.float32,
        log=log,
    )  # fmt: skip
    cuts = np.cumsum([len(s) for s in sequences])[:-1]
    hidden = np.split(hidden, cuts)
    return (hidden, np.split(lays, cuts)) if layers else hidden


def score_width(length: int) -> int:
    """Padded width of a scoring batch whose longest sequence has `length` tokens: the next
    multiple of 64 (at least 64).

    Not a power of two: scoring is compute-bound, and a batch of 8 of SmolLM2's ~300-token
    sequences took 10.95 s at width 512 against 6.92 s at 384 and 5.76 s at 320 (2-core CPU,
    2026-12-08); widths up to 512 compile 8 programs instead of 4.
    """
    return max(64, -(-int(length) // 64) * 64)


def score_concatenated(
    model, params, sequences, *, batch_size: int = 8, layers: tuple = (), layer_dtype=np.float16,
    log=None,
):  # fmt: skip
    """Every sequence's features, one sequence after another: (hidden float32 [N, embed],
    layer features `layer_dtype` [N, len(layers) * embed], or None without `layers`).

    Written into arrays of the final size (no per-sequence copies to concatenate: a million
    tokens of EAGLE-3's three blocks are 3.5 GB in float16). Sequences are scored in batches of
    similar lengths (sorted), each padded to its longest rounded up to a multiple of 64
    (`score_width`), so few programs compile; one forward call per batch. float16 keeps the
    layer features to about 3 significant digits, below the noise EAGLE-style training adds to
    its inputs; the final hidden states, which make the labels p, stay float32. A value beyond
    float16's range (65504; the first blocks' massive activations reach ~2.5e4 in SmolLM2)
    turns the whole array float32; non-finite features raise ValueError.
    """

    def run(p, tokens, n):
        state = model.init_state(tokens.shape[0], tokens.shape[1])
        out = model.forward(p, state, tokens, n, return_layers=layers)
        return out.hidden, (target_features(out, layers) if layers else out.hidden[..., :0])

    forward = jax.jit(run)
    lengths = np.array([len(s) for s in sequences], np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    hidden = lays = None
    order = np.argsort(lengths, kind="stable")
    for i in range(0, len(sequences), batch_size):
        rows = order[i : i + batch_size]
        width = score_width(int(lengths[rows].max()))
        tokens = np.zeros((batch_size, width), np.int32)
        for b, r in enumerate(rows):
            tokens[b, : lengths[r]] = sequences[r]
        n = np.zeros((batch_size,), np.int32)
        n[: len(rows)] = lengths[rows]
        h, f = jax.device_get(forward(params, jnp.asarray(tokens), jnp.asarray(n)))
        if hidden is None:
            hidden = np.zeros((offsets[-1], h.shape[-1]), np.float32)
            lays = np.zeros((offsets[-1], f.shape[-1]), layer_dtype) if layers else None
        for b, r in enumerate(rows):
            hidden[offsets[r] : offsets[r + 1]] = h[b, : lengths[r]]
            if layers:
                rows_f = f[b, : lengths[r]]
                with np.errstate(over="ignore"):  # checked right below
                    lays[offsets[r] : offsets[r + 1]] = rows_f
                if not np.isfinite(lays[offsets[r] : offsets[r + 1]]).all():
                    if not np.isfinite(rows_f).all():
                        raise ValueError(
                            f"the target's layer features of sequence {r} are not finite "
                            "(NaN or inf): check the target's params"
                        )
                    lays = lays.astype(np.float32)  # beyond float16's range: keep float32
                    lays[offsets[r] : offsets[r + 1]] = rows_f
        if log is not None:
            log(f"features {min(i + batch_size, len(sequences))}/{len(sequences)}")
    return hidden, lays


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
      layers: None, or [N, len(feature_layers) * embed] the residual streams after an EAGLE-3
        head's target blocks (what it reads; `features` stay its labels' source): float32, or
        float16 as `score_concatenated` stores them (batches come out float32 either way).
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
        layer features [T, F] (`score_features(..., layers=...)`); `features` and `layers` may
        also be whole arrays [N, ...] (`score_concatenated`), taken as they are. Layer
        features keep their dtype (float16 from `score_concatenated`)."""
        lengths = [len(s) for s in sequences]
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
        mask = np.zeros((offsets[-1],), bool)
        for s, p in enumerate(prompt_lengths):
            # position t predicts token t + 1: train where t + 1 is a reply token.
            mask[offsets[s] + p - 1 : offsets[s + 1] - 1] = True
        return cls(
            np.concatenate(sequences).astype(np.int32),
            _whole(features).astype(np.float32, copy=False),
            mask,
            offsets,
            dict(meta),
            None if layers is None else _whole(layers),
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


def _whole(parts) -> np.ndarray:
    """One array [N, ...]: `parts` itself when it is already one 2-D array, else its pieces
    concatenated."""
    if isinstance(parts, np.ndarray) and parts.ndim == 2:
        return parts
    return np.concatenate(parts)
