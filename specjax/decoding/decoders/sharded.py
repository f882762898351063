"""Autoregressive and speculative generation over a device mesh (data- and tensor-parallel).

`ShardedDecoder` wraps any unchanged decoder of the shared loop driver (`decoding/loop.py`:
autoregressive, speculative, or a later one) and runs the same `init` / `step` / `running` in one
jitted `lax.while_loop` whose inputs, loop state and outputs all have stated shardings. It knows
decoders only through that protocol: their `models` (one per params argument) and the logical
axes their loop state declares.

  * prompts, sequences, per-row counters and every cache's rows: split over `data` (rows never
    talk to each other, so data parallelism costs no collective inside the loop);
  * target parameters: split by the logical-axis rules (default: heads, kv_heads, MLP and
    vocabulary over `model`), its KV cache's heads likewise, so a target too big for one device
    fits and each of its calls runs on every device of the `model` axis;
  * draft parameters (every model after the first): replicated by default
    (`replicate_draft=True`). The draft is small and runs γ sequential one-token steps per
    iteration; split over `model` every step would pay two all-reduces per layer for a matmul
    too small to gain from splitting, so a full copy per device (its cache still split by rows
    over `data`) is faster and uses little memory;
  * the result: replicated, so every process can read all rows (it is small: tokens and counts).

Nothing is donated: the inputs (params, prompts) are reused or tiny, and the large buffers (the
caches) are created inside the program, where the loop already updates them in place.

Same key, same tokens as the unsharded decoder: the PRNG is sharding-invariant
(`jax_threefry_partitionable`), and only the summation order of split matmuls differs.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable
from typing import Any

import jax
from jax.sharding import Mesh

from specjax import checks
from specjax import sharding as sh
from specjax.decoding import arguments, loop
from specjax.decoding.state import check_finite_result


@dataclasses.dataclass(frozen=True)
class ShardedDecoder:
    """Runs a decoder's jitted generation loop on `mesh`.

    Attributes:
      decoder: any decoder of the loop driver (see `decoding/loop.py`'s `Decoder`).
      mesh: the device mesh (see `specjax.sharding.make_mesh`).
      rules: logical-axis rules for the target (and for the draft if not replicated).
      replicate_draft: keep a full copy of the draft's (every non-target model's) parameters
        on every device.
    """

    decoder: Any
    mesh: Mesh
    rules: tuple = sh.DEFAULT_RULES
    replicate_draft: bool = True

    def __post_init__(self):
        missing = [
            name
            for name in ("models", "init", "step", "cache_len")
            if not hasattr(self.decoder, name)
        ]
        if missing:
            raise TypeError(
                f"decoder must be a decoder of the loop driver (decoding/loop.py); "
                f"{type(self.decoder).__name__} lacks {missing}"
            )
        if not isinstance(self.mesh, Mesh):  # None failed with an AttributeError
            raise TypeError(
                f"mesh must be a jax.sharding.Mesh (specjax.sharding.make_mesh); got {self.mesh!r}"
            )
        arguments.check_flag(self.replicate_draft, "replicate_draft")  # "no" was truthy
        if isinstance(self.rules, str | bytes) or not isinstance(self.rules, Iterable):
            raise TypeError(
                f"rules must be a sequence of (logical axis, mesh axes) pairs, got {self.rules!r}"
            )
        rules = tuple(sh.as_rule(r) for r in self.rules)
        object.__setattr__(self, "rules", rules)
        sh.check_rules(self.mesh, rules)
        if any(name not in sh.LOGICAL_AXES for name, _ in rules):  # only then trace the models
            sh.check_rules(self.mesh, rules, sh.declared_axes(self.decoder.models))
        for i, model in enumerate(self.decoder.models):
            if getattr(getattr(model, "config", None), "matmul", "xla") == "packed":
                raise ValueError(
                    f"decoder.models[{i}] uses matmul='packed' (specjax's single-device CPU "
                    "kernels), which ShardedDecoder cannot split over a mesh: convert it with "
                    "model, params = specjax.models.with_matmul(model, params, 'xla') (or "
                    "load_gguf(..., matmul='xla')) and build the decoder on that"
                )

    @property
    def models(self) -> tuple:
        """The decoder's models in the order their params are passed: (target[, draft])."""
        return tuple(self.decoder.models)

    def model_rules(self, index: int) -> tuple:
        """Rules for models[index]: drafts' are data-parallel only when replicated."""
        if index >= 1 and self.replicate_draft:
            return sh.data_parallel_rules(self.rules)
        return self.rules

    @property
    def data_parallelism(self) -> int:
        """How many ways batch rows are split (product of the mesh axes `batch` maps to)."""
        spec = sh.batch_sharding(self.mesh, self.rules, 1).spec
        names = () if spec[0] is None else (spec[0],) if isinstance(spec[0], str) else spec[0]
        return math.prod(self.mesh.shape[n] for n in names)

    def param_shardings(self, *model_params) -> tuple:
        """NamedSharding pytrees for each model's params (concrete or abstract).

        Args:
          *model_params: one params pytree per model (target, then draft for speculative).

        Returns:
          A tuple of pytrees of NamedSharding, like `model_params`.
        """
        self._check_count(model_params)
        return tuple(
            sh.param_shardings(model, params, self.mesh, self.model_rules(i))
            for i, (model, params) in enumerate(zip(self.models, model_params, strict=True))
        )

    def shard_params(self, *model_params) -> tuple:
        """Places each model's params on the mesh (every process passes the same values)."""
        return tuple(
            sh.put(p, s)
            for p, s in zip(model_params, self.param_shardings(*model_params), strict=True)
        )

    def loop_state_shardings(self, state: loop.LoopState):
        """Shardings of a LoopState (concrete, traced or abstract), from its logical axes.

        Scalars and the key are replicated; every per-row array splits by `batch`; model state i
        follows the axes it declares (a KV cache's heads on `kv_heads`) with model i's rules.
        """
        axes = state.logical_axes()
        outer = sh.axes_to_shardings(
            axes.replace(model_states=()), state.replace(model_states=()), self.mesh, self.rules
        )
        inner = tuple(
            sh.axes_to_shardings(a, x, self.mesh, self.model_rules(i))
            for i, (a, x) in enumerate(zip(axes.model_states, state.model_states, strict=True))
        )
        return outer.replace(model_states=inner)

    def generate(self, *model_params, prompts, key, max_new_tokens: int, eos_id=None):
        """Sharded twin of the decoder's `generate` (same tokens for the same key).

        Args:
          *model_params: params per entry of `decoder.models`: (params,) autoregressive,
            (target, draft) speculative.
            Host arrays are placed on the mesh; already placed ones are reused.
          prompts: list of 1-D token sequences, or int [batch, P]; batch must be divisible by
            the data-parallel size.
          key: PRNG key.
          max_new_tokens: >= 1 (traced: new values do not recompile).
          eos_id: stop a row after this token (None: never).

        Returns:
          GenerationResult, replicated on every device (readable by every process).
        """
        self._check_count(model_params)
        arguments.check_decoder_params(self.decoder, model_params)
        key = arguments.canonical_key(key)
        tokens, lengths = self.decoder.prepare(prompts, max_new_tokens)
        self._check_batch(tokens.shape[0])
        shardings = self.param_shardings(*model_params)
        placed = tuple(
            p if _is_placed(p, s) else sh.put(p, s)
            for p, s in zip(model_params, shardings, strict=True)
        )
        rows = sh.batch_sharding(self.mesh, self.rules, tokens.shape)
        rep = sh.replicated(self.mesh)
        tokens = sh.put(tokens, rows)
        lengths = sh.put(lengths, sh.batch_sharding(self.mesh, self.rules, lengths.shape))
        eos = arguments.eos_value(eos_id, self.decoder.vocab_size)
        key, max_new, eos = sh.put((key, max_new_tokens, eos), (rep, rep, rep))
        program = _program(self, _signature(placed))
        result = program(*placed, tokens, lengths, key, max_new, eos)
        check_finite_result(result)
        return result

    def lower(self, *abstract_params, batch: int, prompt_width: int, key=None):
        """Lowers the generation program for abstract inputs (ahead-of-time compilation).

        Works with a mesh of compile-only devices (`jax.experimental.topologies`), so a TPU
        program can be compiled and its memory use checked without the TPU.

        Args:
          *abstract_params: per model, a pytree of `jax.ShapeDtypeStruct` (jax.eval_shape).
          batch: prompt rows.
          prompt_width: padded prompt width (a bucket, see decoding/prompts.py).
          key: an abstract or concrete PRNG key (default: a raw uint32[2] key).

        Returns:
          A `jax.stages.Lowered`; call `.compile()` on it.
        """
        self._check_count(abstract_params)
        arguments.check_decoder_params(self.decoder, abstract_params)
        checks.check_count("batch", batch)
        checks.check_count("prompt_width", prompt_width)
        if prompt_width > self.decoder.cache_len:  # prepare() caps its buckets at the cache
            raise ValueError(
                f"prompt_width={prompt_width} exceeds the decoder's cache_len="
                f"{self.decoder.cache_len}: prompts are padded to at most the cache"
            )
        self._check_batch(batch)
        i32 = jax.numpy.int32
        key = jax.ShapeDtypeStruct((2,), jax.numpy.uint32) if key is None else key
        args = (
            jax.ShapeDtypeStruct((batch, prompt_width), i32),
            jax.ShapeDtypeStruct((batch,), i32),
            jax.ShapeDtypeStruct(key.shape, key.dtype),
            jax.ShapeDtypeStruct((), i32),
            jax.ShapeDtypeStruct((), i32),
        )
        program = _program(self, _signature(abstract_params))
        return program.lower(*abstract_params, *args)

    def _check_batch(self, batch: int):
        if batch % self.data_parallelism:
            raise ValueError(
                f"prompts: a batch of {batch} rows cannot be split {self.data_parallelism} "
                f"ways over the mesh's data axis; pass a multiple of {self.data_parallelism}"
            )

    def _check_count(self, model_params):
        if len(model_params) != len(self.models):
            raise ValueError(
                f"{type(self.decoder).__name__} takes params for {len(self.models)} model(s), "
                f"got {len(model_params)}"
            )


def _is_placed(params, shardings) -> bool:
    """True if every leaf already is a jax.Array with exactly the wanted sharding."""
    leaves, wanted = jax.tree.leaves(params), jax.tree.leaves(shardings)
    return all(
        isinstance(x, jax.Array) and x.sharding.is_equivalent_to(s, x.ndim)
        for x, s in zip(leaves, wanted, strict=True)
    )


def _signature(model_params) -> tuple:
    """Hashable structure, shapes and dtypes of each model's params (the program cache key)."""
    return tuple(
        (
            jax.tree.structure(p),
            tuple((tuple(x.shape), str(x.dtype)) for x in jax.tree.leaves(p)),
        )
        for p in model_params
    )


@functools.lru_cache(maxsize=32)
def _program(sharded: ShardedDecoder, signature: tuple):
    """The jitted generation loop for one ShardedDecoder and one params signature."""
    abstract = tuple(
        treedef.unflatten([jax.ShapeDtypeStruct(s, d) for s, d in leaves])
        for treedef, leaves in signature
    )
    decoder, mesh, rules = sharded.decoder, sharded.mesh, sharded.rules
    rep = sh.replicated(mesh)
    # Prompts [batch, P] and lengths [batch] split by rows; the key and scalars replicated.
    rows2, rows1 = sh.batch_sharding(mesh, rules, 2), sh.batch_sharding(mesh, rules, 1)
    in_shardings = (*sharded.param_shardings(*abstract), rows2, rows1, rep, rep, rep)

    def run(*args):
        *params, tokens, lengths, key, max_new, eos = args
        params = tuple(params)
        s = decoder.init(params, tokens, lengths, key, max_new, eos)
        # Pin the loop carry's layout: the caches are born inside the program, so without this
        # the partitioner could pick any layout for them (or replicate them).
        constrain = lambda s: jax.lax.with_sharding_constraint(  # noqa: E731
            s, sharded.loop_state_shardings(s)
        )
        s = constrain(s)
        s = jax.lax.while_loop(loop.running, lambda s: constrain(decoder.step(params, s)), s)
        return s.result()

    # Batch divisibility by the data axis is checked by `generate` / `lower` before calling.
    return jax.jit(run, in_shardings=in_shardings, out_shardings=rep)
