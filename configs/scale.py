r"""Scaling out: sharded generation and training on many devices and hosts, and AOT checks.

Launch (from the repository root):

    # CPU, 8 fake devices, data 4 x model 2 (seconds; what the tests do):
    XLA_FLAGS=--xla_force_host_platform_device_count=8 \
      python scripts/run_sharded.py --config=configs/scale.py:tiny,model=2 --task=generate
    # A TPU VM or pod slice, a multi-GPU host or cluster: scripts/launch_tpu.sh, launch_gpu.sh.
    # Compile for a TPU topology on any machine with libtpu installed (no TPU needed):
    python scripts/aot_compile_check.py --config=configs/scale.py:target=llama_1b,model=4 \
      --topology=v5e:2x4

Models are randomly initialised unless `target_checkpoint` / `draft_checkpoint` name a training
run or an exported model (`specjax.checkpoint.load_model`); speed and memory do not depend on
the weights, and the acceptance rate of random models is meaningless.

String options after the colon (comma-separated, big_vision style):
    target=tiny          a size of MODEL_SIZES below
    draft=tiny_draft     a size of MODEL_SIZES, or "self" (the target drafts for itself)
    vocab=256            vocabulary (the sizes' default: 256 for tiny ones, 32000 otherwise)
    data=-1,model=1      mesh axis sizes (configs/mesh.py; -1 = the remaining devices)
    tiny                 tiny models and short runs (CPU smoke tests)
Any field can also be set with `--config.<field>=...` flags.
"""

import ml_collections

from configs import mesh as mesh_config
from configs.options import parse_options

# Llama-family shapes (RMSNorm, RoPE, SwiGLU, untied head); grouped-query where kv_heads < heads.
MODEL_SIZES = {
    "tiny": dict(num_layers=2, num_heads=4, num_kv_heads=2, embed_dim=64, mlp_dim=128),
    "tiny_draft": dict(num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32, mlp_dim=64),
    # JackFram/llama-68m's shape: a common draft for 7-8B targets.
    "llama_68m": dict(num_layers=2, num_heads=12, num_kv_heads=12, embed_dim=768, mlp_dim=3072),
    "llama_150m": dict(num_layers=12, num_heads=12, num_kv_heads=4, embed_dim=768, mlp_dim=2048),
    "llama_1b": dict(num_layers=16, num_heads=32, num_kv_heads=8, embed_dim=2048, mlp_dim=8192),
    # Llama 3 8B's shape (its vocabulary is 128256: pass vocab=128256 for the real thing).
    "llama_8b": dict(num_layers=32, num_heads=32, num_kv_heads=8, embed_dim=4096, mlp_dim=14336),
}

_INT_OPTIONS = ("vocab", "data", "model")
_STR_OPTIONS = ("target", "draft")
_SWITCHES = ("tiny",)


def _parse_arg(arg: str | None) -> dict:
    """Parses "k=v,k2=v2,switch" into a dict (switches map to True)."""
    options = parse_options(arg, ints=_INT_OPTIONS, strs=_STR_OPTIONS, switches=_SWITCHES)
    for role in ("target", "draft"):
        size = options.get(role)
        if (
            size is not None
            and size not in MODEL_SIZES
            and not (role == "draft" and size == "self")
        ):
            raise ValueError(f"{role}={size!r} is not one of {sorted(MODEL_SIZES)}")
    return options


def _model(size: str) -> ml_collections.ConfigDict:
    return ml_collections.ConfigDict(dict(size=size, **MODEL_SIZES[size]))


def get_config(arg: str | None = None) -> ml_collections.ConfigDict:
    """Returns the scale-out config; `arg` holds the string options of the module docstring."""
    options = _parse_arg(arg)
    tiny = options.get("tiny", False)
    target = options.get("target", "tiny" if tiny else "llama_150m")
    draft = options.get("draft", "tiny_draft" if tiny else "llama_68m")
    config = ml_collections.ConfigDict()

    # Mesh axes, sizes and logical-axis rules (see configs/mesh.py).
    mesh_arg = ",".join(f"{k}={options[k]}" for k in ("data", "model") if k in options)
    config.mesh = mesh_config.get_config(mesh_arg)

    config.vocab_size = options.get("vocab", 256 if target.startswith("tiny") else 32000)
    config.target = _model(target)
    # "self": the target drafts for itself (α = 1 under greedy decoding).
    config.draft = ml_collections.ConfigDict({"size": "self"}) if draft == "self" else _model(draft)
    # Compute and parameter dtype of both models (bfloat16 on TPU/GPU; float32 on CPU).
    config.dtype = "float32" if tiny else "bfloat16"
    # A training run's workdir or an exported model; "" = random initialisation.
    config.target_checkpoint = ""
    config.draft_checkpoint = ""
    config.seed = 0

    # Generation: prompts per call (a multiple of the mesh's data size), random prompt tokens.
    config.batch_size = 8 if tiny else 32
    config.prompt_len = 16 if tiny else 128
    config.max_new_tokens = 16 if tiny else 256
    # Positions per row in caches and the output buffer.
    config.cache_len = 64 if tiny else 1024
    config.gamma = 4
    # 0 = greedy.
    config.temperature = 0.0
    # Timed repeats after the compiling call.
    config.repeats = 1 if tiny else 3

    # Training throughput: random token windows, AdamW (specjax.training.optim).
    config.train_batch_size = 8 if tiny else 32
    config.seq_len = 32 if tiny else 1024
    config.train_steps = 3 if tiny else 20
    config.peak_lr = 1e-3
    return config
