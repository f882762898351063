"""Sampling warpers: logits -> the probability vector a token is actually drawn from.

Speculative sampling is lossless only if p and q are the distributions the target and the draft
really sample from, so the *same* warper object is applied to both models' logits. Warpers are small
frozen dataclasses (hashable, so they can be static arguments of `jax.jit`), composed in a
`Warper` chain that applies them in order (temperature, then top-k, then top-p, as is standard).

    warper = make_warper(temperature=0.8, top_k=40, top_p=0.95)
    probs = warper.probs(logits)          # [..., vocab] float32, rows sum to 1

Temperature 0 means greedy: the probability vector is the one-hot of the argmax (first index on
ties, like `jnp.argmax`).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np

from specjax import checks
from specjax.decoding.argmax import first_argmax, has_nan
from specjax.decoding.argmax import top_k as _top_k  # make_warper has a top_k argument
from specjax.decoding.categorical import sample_from_probs  # re-exported: the shared sampler

_NEG_INF = -jnp.inf
# The smallest positive temperature. Compiled code may scale logits by 1/T in one fusion and
# divide by T in another; the two differ by about an ulp of logits / T, which softmax's exp
# turns into overflow (NaN probabilities, silently wrong tokens) once |logits| / T passes
# ~7e8 (T = 1e-10 at logits ~5 did). At T >= 1e-4 that needs |logits| > ~7e4.
MIN_TEMPERATURE = 1e-4


_is_real = checks.is_real  # a Python or NumPy real, not a bool
_is_int = checks.is_integer


def _unwrap(x):
    """A concrete 0-d array (NumPy or JAX) as the NumPy scalar it holds; anything else as is."""
    if isinstance(x, np.ndarray | jax.Array) and x.ndim == 0 and not isinstance(x, jax.core.Tracer):
        return np.asarray(x)[()]
    return x


def _masked(logits: jax.Array, keep: jax.Array) -> jax.Array:
    return jnp.where(keep, logits, _NEG_INF)


@dataclasses.dataclass(frozen=True)
class Greedy:
    """Keeps only the argmax (first index among ties): sampling becomes deterministic."""

    def __call__(self, logits: jax.Array) -> jax.Array:
        vocab = logits.shape[-1]
        best = first_argmax(logits, axis=-1)  # jnp.argmax, 10x faster on XLA:CPU at 32k
        return _masked(logits, jnp.arange(vocab) == best[..., None])


@dataclasses.dataclass(frozen=True)
class Temperature:
    """Divides logits by `temperature` (> 0; use `Greedy` or `make_warper` for 0)."""

    temperature: float

    def __post_init__(self):
        t = self.temperature
        if not _is_real(t) or not math.isfinite(t) or t <= 0:
            raise ValueError(
                f"temperature must be a finite number > 0 for Temperature (got {t!r}); "
                "use temperature=0 in make_warper for greedy decoding"
            )
        if t < MIN_TEMPERATURE:
            raise ValueError(
                f"temperature must be 0 (greedy) or >= {MIN_TEMPERATURE:g} (got {t!r}): below "
                "that, float32 logits / temperature overflow softmax in compiled code (NaN "
                "probabilities); use temperature=0 for greedy decoding"
            )

    def __call__(self, logits: jax.Array) -> jax.Array:
        return logits / jnp.asarray(self.temperature, logits.dtype)


@dataclasses.dataclass(frozen=True)
class TopK:
    """Keeps the `top_k` largest logits (ties with the k-th value are all kept)."""

    top_k: int

    def __post_init__(self):
        k = self.top_k
        if not _is_int(k) or k < 1:
            raise ValueError(f"top_k must be an integer >= 1 (got {k!r})")

    def __call__(self, logits: jax.Array) -> jax.Array:
        vocab = logits.shape[-1]
        if self.top_k >= vocab:
            return logits
        kth = _top_k(logits, self.top_k)[0][..., -1:]  # [..., 1]
        return _masked(logits, logits >= kth)


@dataclasses.dataclass(frozen=True)
class TopP:
    """Nucleus sampling: keeps the smallest set of most likely tokens whose mass reaches `top_p`.

    A token is kept when the mass of the tokens strictly more likely than it (in sorted order) is
    below `top_p`, so the most likely token is always kept and `top_p=1` keeps everything.

    Attributes:
      top_p: in (0, 1].
      tiers: increasing token counts tried before a sort of whole rows (see `NUCLEUS_TIERS`);
        they change the cost, never the kept set. `make_warper` leads with top_k's count.
    """

    top_p: float
    tiers: tuple = None  # None: NUCLEUS_TIERS

    def __post_init__(self):
        p = self.top_p
        if not _is_real(p) or not (0.0 < p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1] (got {p!r})")
        tiers = NUCLEUS_TIERS if self.tiers is None else self.tiers
        if not isinstance(tiers, tuple | list) or not all(_is_int(k) and k >= 1 for k in tiers):
            raise ValueError(f"TopP.tiers must be a tuple of integers >= 1 (got {tiers!r})")
        if list(tiers) != sorted(set(tiers)):
            raise ValueError(f"TopP.tiers must increase strictly (got {tiers!r})")
        object.__setattr__(self, "tiers", tuple(int(k) for k in tiers))

    def __call__(self, logits: jax.Array) -> jax.Array:
        if self.top_p >= 1.0:
            return logits
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)  # [..., vocab]
        tiers = () if self.top_p > 1.0 - _PREFILTER_MARGIN else self.tiers
        return _masked(logits, _nucleus(probs, self.top_p, tiers))


# Most nuclei hold a few dozen tokens of a large vocabulary. `TopP` first takes the 1,024 most
# likely tokens with XLA's TopK kernel (0.5 ms for a row of 49,152 on our CPU, where a stable
# sort of the row costs 16 ms), then 4,096 (1.5 ms), and sorts whole rows only when some row's
# nucleus reaches past those. SmolLM2-135M-Instruct's t = 1 rows along its own samples (24
# prompts, 2,304 rows): at top_p = 0.9 the nucleus held a median of 14 tokens, more than 1,024
# in 1.7 % of rows and never more than 4,096; at 0.95, 37, 7.5 % and 0.09 %.
NUCLEUS_TIERS = (1024, 4096)
# A tier decides only when its k tokens hold at least top_p + this mass, far above the float32
# rounding of a cumulative sum (a few ulps of 1), so every token past the k-th has mass before
# it >= top_p in the sorted computation too: every path keeps the same set (tested).
_PREFILTER_MARGIN = 1e-4


def _nucleus(probs: jax.Array, top_p: float, tiers: tuple) -> jax.Array:
    """[..., vocab] probabilities -> [..., vocab] bool, the nucleus: the smallest tier whose
    tokens cover every row's nucleus, else a sort of each whole row. One branch runs for the
    whole batch, so nothing is computed twice."""
    vocab = probs.shape[-1]
    if not tiers or tiers[0] >= vocab:
        return _nucleus_by_sort(probs, top_p)
    values, ids = _top_k(probs, tiers[0])  # [..., k] most likely first, lower id first on ties
    covered = jnp.all(jnp.sum(values, axis=-1) >= top_p + _PREFILTER_MARGIN)
    return jax.lax.cond(
        covered,
        lambda: _scatter_keep(ids, _kept_in_order(values, top_p), vocab),
        lambda: _nucleus(probs, top_p, tiers[1:]),
    )


def _kept_in_order(sorted_probs: jax.Array, top_p: float) -> jax.Array:
    """[..., n] probabilities, most likely first -> [..., n] bool: the mass strictly before each
    token is below top_p. A cumulative sum's first n entries do not depend on what follows them
    on XLA:CPU (tested), so a prefix of the sorted row gives the same decisions as the row."""
    mass_before = jnp.cumsum(sorted_probs, axis=-1) - sorted_probs
    return mass_before < top_p


def _scatter_keep(ids: jax.Array, keep_sorted: jax.Array, vocab: int) -> jax.Array:
    """Decisions in sorted order ([..., n] at distinct token `ids`) -> [..., vocab] bool."""
    n = ids.shape[-1]
    rows = ids.reshape(-1, n)  # [rows, n]
    index = jnp.arange(rows.shape[0])[:, None]
    keep = (
        jnp.zeros((rows.shape[0], vocab), bool)
        .at[index, rows]
        .set(keep_sorted.reshape(rows.shape), unique_indices=True)
    )
    return keep.reshape(ids.shape[:-1] + (vocab,))


def _nucleus_by_sort(probs: jax.Array, top_p: float) -> jax.Array:
    """[..., vocab] probabilities -> [..., vocab] bool, the nucleus, by a stable sort of each
    whole row. Its permutation is inverted by a scatter: a second argsort did the same at the
    cost of another sort (113 -> 66 ms for 4 x 49,152 logits on XLA:CPU, under load)."""
    order = jnp.argsort(-probs, axis=-1, stable=True)  # [..., vocab] most likely first
    sorted_probs = jnp.take_along_axis(probs, order, axis=-1)
    return _scatter_keep(order, _kept_in_order(sorted_probs, top_p), probs.shape[-1])


@dataclasses.dataclass(frozen=True)
class Warper:
    """An ordered chain of warpers; `probs(logits)` gives the distribution to sample from.

    Attributes:
      warpers: applied left to right to the logits.
    """

    warpers: tuple = ()

    def __post_init__(self):
        for w in self.warpers:
            if not callable(w):
                raise TypeError(f"Warper.warpers must hold callables, got {w!r}")
        object.__setattr__(self, "warpers", tuple(self.warpers))

    @property
    def is_greedy(self) -> bool:
        """True when sampling is deterministic (argmax)."""
        return any(isinstance(w, Greedy) for w in self.warpers)

    @property
    def ends_greedy(self) -> bool:
        """True when `Greedy` is the last warper: `probs` is then the one-hot of an argmax, and
        `greedy_tokens` reads that token off the logits (`make_warper(0)` is such a chain)."""
        return bool(self.warpers) and isinstance(self.warpers[-1], Greedy)

    def logits(self, logits: jax.Array) -> jax.Array:
        """Warped logits in float32, excluded tokens at -inf.

        Args:
          logits: [..., vocab] any float dtype.

        Returns:
          [..., vocab] float32.
        """
        out = logits.astype(jnp.float32)
        for w in self.warpers:
            out = w(out)
        return out

    def probs(self, logits: jax.Array) -> jax.Array:
        """The probability vector to sample from.

        Args:
          logits: [..., vocab] any float dtype.

        Returns:
          [..., vocab] float32, each row sums to 1 (exactly one-hot when greedy).
        """
        warped = self.logits(logits)
        if self.is_greedy:
            # Exactly one-hot, so a greedy target is a point mass without rounding residue.
            return (warped > _NEG_INF).astype(jnp.float32)
        return jax.nn.softmax(warped, axis=-1)

    def greedy_tokens(self, logits: jax.Array, no_mass: int = 0) -> jax.Array:
        """A greedy warper's draw without the one-hot: what `sample` returns, for any key.

        The index `probs` puts its mass on (the warpers before `Greedy` applied, then the first
        argmax), or 0 where that row has no mass (every logit -inf; `sample_from_probs` of an
        all-zero row), read off the logits without building the [..., vocab] one-hot or
        drawing the Gumbels a draw from it costs.

        Args:
          logits: [..., vocab] any float dtype.
          no_mass: returned for a row without mass (0: what sampling returns; a verifier passes
            -1 to tell such rows apart, `rules.point_mass_accept`).

        Returns:
          [...] int32 token ids.
        """
        if not self.ends_greedy:
            raise ValueError(
                f"greedy_tokens needs a warper ending in Greedy (temperature 0), got {self!r}"
            )
        out = logits.astype(jnp.float32)
        for w in self.warpers[:-1]:
            out = w(out)
        best = first_argmax(out, axis=-1)  # [...]
        value = jnp.take_along_axis(out, best[..., None], axis=-1)[..., 0]
        # Greedy's one-hot is (logit > -inf) at best: all zero for -inf (and NaN) there.
        return jnp.where(value > _NEG_INF, best, no_mass)

    def draw(self, key: jax.Array, logits: jax.Array) -> tuple[jax.Array, jax.Array]:
        """(`sample(key, logits)`, `probs(logits)`): a token and the law it was drawn from.

        A greedy warper returns the argmax without drawing from the one-hot (`greedy_tokens`:
        the same token), so a caller that does not use the probabilities pays only the argmax.
        Its probabilities are NaN across a row whose logits hold NaN (softmax's answer when
        sampling), so a NaN draft is seen in q whatever the temperature.
        """
        if self.ends_greedy:  # one argmax for both: Greedy's one-hot, zero where no mass
            token = self.greedy_tokens(logits, no_mass=-1)
            probs = jax.nn.one_hot(token, logits.shape[-1], dtype=jnp.float32)
            # A row whose logits hold NaN has no law: NaN across it, as softmax gives when
            # sampling, so the decoders' NaN scan of q flags it (has_nan: the argmax's max).
            probs = jnp.where(has_nan(logits)[..., None], jnp.nan, probs)
            return jnp.maximum(token, 0), probs
        probs = self.probs(logits)
        return sample_from_probs(key, probs), probs

    def sample(self, key: jax.Array, logits: jax.Array) -> jax.Array:
        """Draws token ids from `probs(logits)`.

        Args:
          key: a PRNG key.
          logits: [..., vocab].

        Returns:
          [...] int32 token ids.
        """
        return self.draw(key, logits)[0]


def check_warper(warper, name: str = "warper") -> None:
    """Raises TypeError naming `name` unless `warper` is a specjax `Warper`."""
    if not isinstance(warper, Warper):
        raise TypeError(f"{name} must be a specjax Warper (make_warper(...)); got {warper!r}")


def make_warper(temperature: float = 1.0, top_k: int | None = None, top_p: float = 1.0) -> Warper:
    """Builds the standard chain: temperature (0 = greedy), then top-k, then top-p.

    Args:
      temperature: 0 selects greedy decoding (top_k/top_p are then irrelevant); else
        >= `MIN_TEMPERATURE` (1e-4).
      top_k: None or 0 disables; else an integer >= 1.
      top_p: in (0, 1]; 1 disables.

    Returns:
      A frozen, hashable `Warper`.
    """
    temperature, top_k, top_p = (_unwrap(x) for x in (temperature, top_k, top_p))
    if not _is_real(temperature) or not math.isfinite(temperature):
        raise ValueError(f"temperature must be a finite number >= 0 (got {temperature!r})")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0 (got {temperature}); 0 means greedy")
    if top_k is not None and (not _is_int(top_k) or top_k < 0):
        raise ValueError(
            f"top_k must be an integer >= 1, or 0 / None to disable it (got {top_k!r})"
        )
    TopP(top_p)  # validates
    if temperature == 0:
        return Warper((Greedy(),))
    chain = []
    if temperature != 1:
        chain.append(Temperature(float(temperature)))
    if top_k:
        chain.append(TopK(int(top_k)))
    if top_p < 1:
        # After top-k, the first top_k tokens usually hold every kept token (ties may add more;
        # the tier checks its coverage): 0.1 ms a row at top_k = 40 instead of 0.5 at 1,024.
        lead = (int(top_k),) if top_k and top_k < NUCLEUS_TIERS[0] else ()
        chain.append(TopP(float(top_p), lead + NUCLEUS_TIERS))
    return Warper(tuple(chain))
