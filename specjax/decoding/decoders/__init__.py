"""Decoders: each one a `Decoder` (`specjax/decoding/loop.py`) on the shared loop driver.

`autoregressive.py` (one target call per token), `steps.py` (`SpeculativeSteps`, the propose →
score → verify → emit → commit iteration every speculative decoder shares), `speculative.py`
(`SpeculativeDecoder`, the chain), `verify_width.py` (verification only as wide as the longest
draft), `tree.py` (`TreeSpeculativeDecoder`, a token tree verified in one call), `beam.py`
(`BeamSearchDecoder`),
`speculative_beam.py` (`SpeculativeBeamDecoder`) and `sharded.py` (`ShardedDecoder`, any
decoder over a device mesh). A new decoder is one new file here offering the loop's `Decoder`
protocol (`models`, `init`, `step`, ...); it reuses a drafter (`drafters/`, `trees/`) and a rule
(`rules/`) rather than copying them. Callers import from `specjax.decoding`.
"""
