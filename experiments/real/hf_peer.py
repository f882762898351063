"""transformers on the same GGUF weights: autoregressive, prompt lookup, assisted generation.

transformers dequantizes the file itself (`from_pretrained(dir, gguf_file=...)`, float32, torch
on the CPU with as many threads as cores). Greedy, batch 1, the same chat prompts and token
budget as specjax's tables; every call is timed round-robin with specjax's own autoregressive
decoding (passed in), so "ours vs theirs" comes from one run.
"""

from __future__ import annotations

import copy
import os

import numpy as np

from specjax.benchmark.timing import interleaved, ratio_interval


def load_hf(path: str):
    """(transformers model, its tokenizer) for the GGUF file at `path` (needs the [hf] extra)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(os.cpu_count() or 1)
    folder, name = os.path.dirname(path), os.path.basename(path)
    model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    return model.eval(), AutoTokenizer.from_pretrained(folder, gguf_file=name)


def truncated_assistant(model, layers: int):
    """The model's first `layers` decoder layers with its embedding, norm and head (shared)."""
    config = copy.deepcopy(model.config)
    config.num_hidden_layers = layers
    assistant = type(model)(config).eval()
    assistant.load_state_dict(model.state_dict(), strict=False)  # extra layers are ignored
    return assistant


def hf_table(
    path: str,
    prompt_ids: list,
    eos_id: int,
    specjax_ar: dict,
    *,
    max_new_tokens: int = 64,
    rounds: int = 3,
    lookup_tokens: int = 4,
    assistant_layers: int = 4,
) -> dict:
    """ms/token and speedups of transformers' generation modes, with specjax's AR beside them.

    Args:
      path: the GGUF file.
      prompt_ids: chat-templated prompts, as 1-D id arrays.
      eos_id: the end-of-turn id (generation stops there).
      specjax_ar: {prompt index: zero-argument callable} of specjax's autoregressive decoding.
      max_new_tokens, rounds: as for `experiments.common.draft_table.draft_table`.
      lookup_tokens: `prompt_lookup_num_tokens` (transformers' prompt lookup).
      assistant_layers: layers of the truncated assistant model.

    Returns:
      {"rows": [{"mode", "ms_per_token", "speedup_vs_hf_ar", "interval"}],
      "specjax_over_hf_ar": ratio of ms/token (< 1: specjax faster), its interval}.
    """
    import torch

    model, _ = load_hf(path)
    assistant = truncated_assistant(model, assistant_layers)
    common = dict(max_new_tokens=max_new_tokens, do_sample=False, eos_token_id=eos_id)
    modes = {
        "transformers AR": {},
        f"transformers prompt lookup ({lookup_tokens})": dict(
            prompt_lookup_num_tokens=lookup_tokens
        ),
        f"transformers assisted (first {assistant_layers} layers)": dict(assistant_model=assistant),
    }

    def run(ids, kwargs):
        with torch.no_grad():
            out = model.generate(torch.tensor([ids]), **common, **kwargs)
        return out.shape[1] - len(ids)

    calls = {}
    for i, ids in enumerate(prompt_ids):
        ids = [int(t) for t in ids]
        for mode, kwargs in modes.items():
            calls[(mode, i)] = lambda ids=ids, kwargs=kwargs: run(ids, kwargs)  # tokens
        calls[("specjax AR", i)] = specjax_ar[i]
    timed = interleaved(calls, repeats=rounds, warmup=1)

    def per_token(name):
        seconds = np.sum([timed[(name, i)].samples for i in range(len(prompt_ids))], axis=0)
        tokens = sum(_count(timed[(name, i)].output) for i in range(len(prompt_ids)))
        return seconds / max(tokens, 1)  # [rounds]

    base = per_token("transformers AR")
    rows = []
    for mode in modes:
        t = per_token(mode)
        rows.append(
            {
                "mode": mode,
                "ms_per_token": float(np.median(t) * 1e3),
                "speedup_vs_hf_ar": float(np.median(base / t)),
                "interval": ratio_interval(base, t),
            }
        )
    ours = per_token("specjax AR")
    return {
        "rows": rows,
        "specjax_ar_ms_per_token": float(np.median(ours) * 1e3),
        "specjax_over_hf_ar": float(np.median(ours / base)),
        "specjax_over_hf_ar_interval": ratio_interval(ours, base),
    }


def _count(output) -> int:
    """Tokens of a call: transformers' calls return their count, specjax's a result."""
    if isinstance(output, int):
        return output
    return int(output.lengths[0] - output.prompt_lengths[0])


def format_hf(table: dict) -> str:
    """The peer table as markdown."""
    lines = ["| transformers mode | ms/token | speedup vs its AR (95 %) |", "|---|---|---|"]
    for r in table["rows"]:
        low, high = r["interval"] or (float("nan"), float("nan"))
        lines.append(
            f"| {r['mode']} | {r['ms_per_token']:.1f} | {r['speedup_vs_hf_ar']:.2f}x "
            f"({low:.2f}-{high:.2f}) |"
        )
    low, high = table["specjax_over_hf_ar_interval"] or (float("nan"), float("nan"))
    lines.append(
        f"\nspecjax AR {table['specjax_ar_ms_per_token']:.1f} ms/token = "
        f"{table['specjax_over_hf_ar']:.2f}x transformers' AR time ({low:.2f}-{high:.2f})"
    )
    return "\n".join(lines)
