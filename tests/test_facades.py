"""The package facades keep every public name they exported at 88c36a1 (issue 29), and a module
split into a package later keeps, in its facade, every public name it defined.

Module paths inside the packages may move (`specjax.decoding` became rooms: rules, drafters,
trees, decoders), but code outside the project imports from the facades, and must not break:
each name below stays in the facade's `__all__` and resolves to an attribute. New names may be
added; none may disappear.
"""

import importlib

import pytest

# `__all__` of each facade at commit 88c36a1, sorted.
EXPORTED_AT_88C36A1 = {
    "specjax.decoding": [
        "AdaptiveDrafter",
        "AutoregressiveDecoder",
        "BeamResult",
        "BeamSearchDecoder",
        "BeamState",
        "ConfidenceGamma",
        "DecodeStats",
        "Decoder",
        "Drafter",
        "FixedGamma",
        "GenerationResult",
        "Greedy",
        "HeuristicGamma",
        "LookupDrafter",
        "LookupTreeDrafter",
        "LoopState",
        "LossyRuleWarning",
        "ModelDrafter",
        "Proposal",
        "Sequences",
        "ShardedDecoder",
        "SpeculativeBeamDecoder",
        "SpeculativeDecoder",
        "SpeculativeDrafter",
        "Temperature",
        "TheoryGamma",
        "TokenTree",
        "TopK",
        "TopP",
        "TreeDrafter",
        "TreeSpeculativeDecoder",
        "Verdict",
        "Warper",
        "block_accept",
        "expected_accepted",
        "generate",
        "hardware_aware_tree",
        "make_warper",
        "optimal_tree",
        "parse_gamma_policy",
        "positional_from_conditional",
        "raw_counts",
        "residual_distribution",
        "sample_from_probs",
        "speculative_accept",
        "stream",
        "summarize_stats",
        "tree_accept",
    ],
    "specjax.models": [
        "KVCache",
        "LanguageModel",
        "ModelOutput",
        "NgramLM",
        "PromptLookupLM",
        "RopeScaling",
        "Transformer",
        "TransformerConfig",
        "TransformerLM",
        "UniformLM",
        "build",
        "build_draft",
        "check_pair",
        "fit_ngram",
        "init_model",
        "model_config",
        "rollback",
        "select_rows",
        "sequence_logits",
        "state_logical_axes",
    ],
    "specjax.testing": [
        "Calibration",
        "CheckResult",
        "Chi2",
        "KINDS",
        "PVALUE_THRESHOLD",
        "Report",
        "biased",
        "calibrate",
        "check_acceptance_rule",
        "check_decoder",
        "chi2_sf",
        "law",
        "pooled_chi2",
        "sampler",
        "stats",
        "tiny_bigram_pair",
    ],
    "specjax.convert": [
        "HFPair",
        "HFTokenizer",
        "SUPPORTED_MODEL_TYPES",
        "check_vocab_match",
        "config_from_hf",
        "load_hf_model",
        "load_hf_pair",
        "load_hf_tokenizer",
        "params_from_hf",
        "read_config",
        "read_tensors",
        "resize_vocab",
    ],
    "specjax.training": [
        "MODEL_SIZES",
        "TrainState",
        "evaluate",
        "fit_and_save",
        "init_train_state",
        "learning_rate_schedule",
        "load_ngram",
        "make_eval_step",
        "make_optimizer",
        "make_train_step",
        "model_cache_dir",
        "model_config",
        "ngram_cache_dir",
        "run_fingerprint",
        "save_ngram",
        "sequence_logits",
        "token_nll",
    ],
    "specjax.data": [
        "BOS_ID",
        "ByteTokenizer",
        "CORPORA",
        "Corpus",
        "EOS_ID",
        "NUM_BYTES",
        "PAD_ID",
        "Prompts",
        "SPLITS",
        "ShakespeareNotFetchedError",
        "TrainBatches",
        "VOCAB_SIZE",
        "batch_at",
        "eval_batches",
        "eval_windows",
        "fetch_shakespeare",
        "load_corpus",
        "load_corpus_info",
        "pad_batch",
        "sample_prompts",
        "spread_eval_batches",
        "window_starts",
    ],
}


# Modules that became packages later: the public names their module defined before the split.
# `specjax.checkpoint` (one module at 9c1151c, a package since: format, checkpointer, export).
DEFINED_BEFORE_SPLIT = {
    "specjax.checkpoint": [
        "CHECKPOINT_SUBDIR",
        "CORRUPT_PREFIX",
        "CheckpointError",
        "CheckpointMismatchError",
        "Checkpointer",
        "export_model",
        "load_model",
        "load_params",
        "model_config_from_dict",
        "model_config_to_dict",
        "tree_checksum",
    ],
}
PINNED = {**EXPORTED_AT_88C36A1, **DEFINED_BEFORE_SPLIT}


@pytest.mark.parametrize("facade", sorted(PINNED))
def test_facade_keeps_every_name_it_exported(facade):
    module = importlib.import_module(facade)
    missing = sorted(set(PINNED[facade]) - set(module.__all__))
    assert not missing, f"{facade}.__all__ lost {missing}"
    unresolved = [n for n in PINNED[facade] if not hasattr(module, n)]
    assert not unresolved, f"{facade} lists but does not define {unresolved}"


def test_the_pin_can_fail(monkeypatch):
    # A test that cannot fail is a defect: a facade that drops a name is caught.
    module = importlib.import_module("specjax.decoding")
    monkeypatch.setattr(module, "__all__", [n for n in module.__all__ if n != "tree_accept"])
    with pytest.raises(AssertionError, match="tree_accept"):
        test_facade_keeps_every_name_it_exported("specjax.decoding")
