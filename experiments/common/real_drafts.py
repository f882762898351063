"""The drafts specjax builds for a real target: training-free kinds, trained heads, distilled.

Drafts (all through the same `SpeculativeDecoder`, γ fixed per run):
  * prompt lookup (`LookupDrafter`: the continuation of the sequence's latest n-gram match);
  * a sparse bigram fitted on the target's own samples (`SparseBigramLM`, on replies to
    `SAMPLE_PROMPTS`, which are not evaluation prompts);
  * the target's first K layers (`models.build.truncated`, sharing its embedding and head);
  * the uniform draft (α ≈ 1 / vocab: the cost of speculating with nothing);
  * trained feature heads, EAGLE-1 and Medusa (`configs/heads.py` runs, `--heads=<workdir>`),
    trained on the target's replies to `experiments/common/train_prompts`, never on these
    evaluation prompts; EAGLE-1 heads also as static trees (`--trees=2-2-1-1`) and as EAGLE-2
    dynamic trees (`--dynamic=5-4-16`: depth, top-k, nodes);
  * distilled small transformers (`configs/heads.py:distilled` runs, `--heads=<workdir>`, the
    SpS baseline), decoded as plain model drafts.

They are measured against autoregressive decoding by `experiments/common/draft_table.py`.
"""

from __future__ import annotations

import os

import numpy as np

from experiments.common.real_prompts import SAMPLE_PROMPTS
from specjax.decoding import (
    AutoregressiveDecoder,
    LookupDrafter,
    TokenTree,
    make_warper,
)
from specjax.models import EagleHead, SparseBigramLM, UniformLM, fit_sparse_bigram
from specjax.models.build import truncated
from specjax.models.distilled_draft import DistilledDraft
from specjax.training.head_run import EXPORT_SUFFIX, load_head


def chat_ids(tokenizer, prompts) -> list[np.ndarray]:
    """Token ids of each prompt's chat template, generation prompt added."""
    return [np.asarray(tokenizer.apply_chat_template(p.messages), np.int32) for p in prompts]


def target_samples(model, params, tokenizer, *, max_new_tokens: int = 128, seed: int = 0):
    """The target's replies (t = 1) to SAMPLE_PROMPTS, prompts included: token arrays."""
    import jax

    ids = [np.asarray(tokenizer.apply_chat_template([{"role": "user", "content": t}]), np.int32)
           for t in SAMPLE_PROMPTS]  # fmt: skip
    ar = AutoregressiveDecoder(model, make_warper(1.0), cache_len=512)
    out = ar.generate(
        params, prompts=ids, key=jax.random.PRNGKey(seed), max_new_tokens=max_new_tokens,
        eos_id=tokenizer.eos_id,
    )  # fmt: skip
    return [np.asarray(out.tokens[b, : int(out.lengths[b])]) for b in range(len(ids))]


# Training steps of the trained drafts whose figures experiments/real/RESULTS.md reports.
HEAD_STEPS = {"eagle1": 800, "medusa": 150, "distilled": 200}


def head_spec(name: str) -> str:
    """configs/heads.py options of a head name: "eagle1", "medusa", "distilled<layers>"."""
    if name in ("eagle1", "medusa"):
        return f"{name},steps={HEAD_STEPS[name]}"
    if name.startswith("distilled") and name[len("distilled") :].isdigit():
        layers = int(name[len("distilled") :])
        return f"distilled,layers={layers},steps={HEAD_STEPS['distilled']}"
    raise ValueError(
        f"config.heads entry {name!r} is not 'eagle1', 'medusa' or 'distilled<layers>' "
        "(like 'distilled2')"
    )


def trained_heads(names, pretrained: str, label: str, heads_dir: str = "", log=print) -> list:
    """Workdirs of trained drafts for a target, training each that has no finished run first.

    Args:
      names: head names ("eagle1", "medusa", "distilled<layers>"), or workdirs of trained
        runs or files that `export_head` wrote (an existing one is used as it is).
      pretrained: the target (a registered name or a .gguf path), which trains them.
      label: a short name of the target, for the workdirs: <heads_dir>/<name>-<label>.
      heads_dir: where the runs live ("": $SPECJAX_CACHE/heads).
      log: progress printer.

    Returns:
      One workdir per name; a run there is resumable (`configs/heads.py`), so an interrupted
      training continues where it stopped.
    """
    from specjax.pretrained import cache_dir

    root = os.path.expanduser(heads_dir or os.path.join(cache_dir(), "heads"))
    workdirs = []
    for name in names:
        if os.path.isdir(name) or (name.endswith(EXPORT_SUFFIX) and os.path.isfile(name)):
            workdirs.append(name)  # a trained run's workdir or exported file, used as it is
            continue
        spec = head_spec(name)
        workdir = os.path.join(root, f"{name}-{label}")
        if not os.path.exists(os.path.join(workdir, "summary.json")):
            from configs import heads as heads_config
            from experiments.heads import train

            log(f"  training {name} into {workdir} (configs/heads.py:{spec}, resumable)")
            head_config = heads_config.get_config(spec)
            head_config.target = pretrained
            train.run(head_config, workdir)
        workdirs.append(workdir)
    return workdirs


def distilled_pair(config, log=print):
    """(target, tparams, tokenizer, draft, dparams, draft name) for a model-draft experiment.

    The target is `config.pretrained`; the draft is the distilled small transformer
    `config.draft_head` ("distilled<layers>", trained first into
    <config.heads_dir>/<name>-<config.target_label> when missing, or a trained run's workdir
    or exported file), as a plain model draft (`DistilledDraft.decode_model`); with
    `config.draft_vocab` = N > 0, drafting over its training data's N most frequent tokens only
    (a `ReducedVocabLM`).
    """
    from specjax.pretrained import load_pretrained

    target, tparams, tokenizer = load_pretrained(config.pretrained, "target")
    [workdir] = trained_heads(
        (config.draft_head,), config.pretrained, config.target_label, config.heads_dir, log
    )
    head, head_params = load_head(workdir, target)
    if not isinstance(head, DistilledDraft):
        raise ValueError(
            f"config.draft_head={config.draft_head!r} is not a distilled draft: this experiment "
            "needs a draft model ('distilled<layers>')"
        )
    name = head_label(workdir)
    size = int(config.get("draft_vocab", 0))
    if not size:
        draft, dparams = head.decode_model(head_params, tparams)
        return target, tparams, tokenizer, draft, dparams, name
    ids = _frequent_ids(workdir, target.vocab_size, size, "config.draft_vocab")
    draft, dparams = head.decode_model(head_params, tparams, draft_ids=ids)
    return target, tparams, tokenizer, draft, dparams, f"{name} over {size} tokens"


def build_drafts(
    model,
    params,
    tokenizer,
    *,
    layers=(4, 8),
    samples=None,
    heads=(),
    trees=(),
    dynamic=(),
    kinds=None,
    draft_vocabs=(),
    vocab_order=None,
) -> dict:
    """name -> (draft, draft_params) for every training-free draft kind, plus trained heads.

    Args:
      model, params, tokenizer: the target.
      layers: the truncated-target drafts (first K layers).
      samples: target samples for the bigram (None: drawn here).
      heads: workdirs of trained drafts (`configs/heads.py` runs), each a draft
        "EAGLE-1 (<workdir name>)", "EAGLE-3 (...)", "Medusa (...)" or "distilled K layers
        (...)".
      trees: static trees each head also drafts, as branchings (e.g. (2, 2, 1, 1), named
        "2-2-1-1") or TokenTrees (any shape, e.g. Sequoia's, named by their parents
        "-1/0/0/1"): entries (head, params, TokenTree), decoded by `TreeSpeculativeDecoder`
        (Sequoia's rule: siblings without replacement; top-k children at t = 0).
      dynamic: `DynamicTree` budgets each EAGLE head also drafts as EAGLE-2 dynamic trees
        ("EAGLE-2 d-k-N (<workdir name>)": depth d, top-k k, N nodes with the root; point-mass
        verification; "EAGLE-3 dynamic d-k-N (...)" for an EAGLE-3 head).
      kinds: keep only drafts whose name starts with one of these (None: all).
      draft_vocabs: sizes N; each distilled draft also drafts over its training data's N most
        frequent tokens ("distilled K layers over N tokens (...)": `ReducedVocabLM`, its
        output layer at those N columns only, q = 0 elsewhere), and so does each EAGLE head
        with a reduced vocabulary of more than N tokens ("EAGLE-3 over N tokens (...)": its own
        output layer cut to those columns, `EagleHead.restricted`).
      vocab_order: a trained draft's workdir or exported file whose training data ranks the
        tokens for `draft_vocabs` (None: each draft's own). For a head whose own data is
        neither recorded nor cached here; an EAGLE head then keeps the N of its own ids that
        rank highest there.
    """
    keep = lambda name: kinds is None or any(name.startswith(k) for k in kinds)  # noqa: E731
    vocab = model.vocab_size
    drafts = {}
    if keep("prompt lookup"):
        drafts["prompt lookup"] = (LookupDrafter(vocab, max_ngram=3), {})
    if keep("bigram"):
        if samples is None:
            samples = target_samples(model, params, tokenizer)
        drafts["bigram (target samples)"] = (
            SparseBigramLM(vocab, 16),
            fit_sparse_bigram(samples, vocab, top_k=16),
        )
    for k in layers:
        if keep(f"first {k} layers"):
            drafts[f"first {k} layers"] = truncated(model, params, k)
    if keep("uniform"):
        drafts["uniform"] = (UniformLM(vocab), {})
    for workdir in heads:
        label = head_label(workdir)
        head, head_params = load_head(workdir, model)
        if isinstance(head, DistilledDraft):  # a plain model draft once trained
            name = f"distilled {head.num_layers} layers ({label})"
            if keep(name):
                drafts[name] = head.decode_model(head_params, params)
            for size in draft_vocabs:
                name = f"distilled {head.num_layers} layers over {size} tokens ({label})"
                if keep(name):
                    ids = _frequent_ids(vocab_order or workdir, vocab, size, "draft_vocabs")
                    drafts[name] = head.decode_model(head_params, params, draft_ids=ids)
            continue
        eagle = isinstance(head, EagleHead)
        if eagle:  # trained in the xla layout; decodes in the target's (packed on the CPU)
            head, head_params = head.with_matmul(head_params, model.config.matmul)
        kind = _eagle_kind(head) if eagle else "Medusa"
        named = {f"{kind} ({label})": None}
        for entry in trees if eagle else ():
            if isinstance(entry, TokenTree):  # any shape, named by its parents
                shape, tree = tree_text(entry), entry
            else:  # a branching per depth
                shape, tree = "-".join(map(str, entry)), TokenTree.from_branching(entry)
            named[f"{kind} tree {shape} ({label})"] = tree
        for budget in dynamic if eagle else ():
            shape = f"{budget.depth}-{budget.top_k}-{budget.num_nodes}"
            dyn = "EAGLE-2" if kind == "EAGLE-1" else "EAGLE-3 dynamic"
            named[f"{dyn} {shape} ({label})"] = budget
        for name, tree in named.items():
            if keep(name):
                drafts[name] = (head, head_params) if tree is None else (head, head_params, tree)
        if eagle and head.draft_ids is not None:
            for size in draft_vocabs:
                name = f"{kind} over {size} tokens ({label})"
                if keep(name):
                    source = vocab_order or workdir
                    drafts[name] = _restricted_head(source, head, head_params, size, vocab)
    return drafts


def tree_text(tree) -> str:
    """A TokenTree in the parents notation of `TokenTree.parse` and bench_real's `--trees`:
    "-1/0/0/1"."""
    return "/".join(str(p) for p in tree.parents)


def head_label(workdir: str) -> str:
    """A head run directory's or exported file's name, as draft names show it."""
    return os.path.basename(os.path.normpath(workdir)).removesuffix(EXPORT_SUFFIX)


def _eagle_kind(head) -> str:
    return "EAGLE-3" if head.feature_layers else "EAGLE-1"


def eagle_heads(target, workdirs) -> dict:
    """label -> (EagleHead in the xla layout, its params) for trained EAGLE heads: head run
    directories or exported files; ValueError naming `heads` for any other kind of draft."""
    out = {}
    for workdir in workdirs:
        label = head_label(workdir)
        head, head_params = load_head(workdir, target)
        if not isinstance(head, EagleHead):
            raise ValueError(
                f"heads: {workdir!r} holds a {type(head).__name__}, not an EAGLE head (the "
                "head_layout and head_trees parts take EAGLE heads only)"
            )
        out[f"{_eagle_kind(head)} ({label})"] = (head, head_params)
    return out


def _restricted_head(order_from, head, head_params, size: int, vocab: int) -> tuple:
    """A reduced-vocabulary EAGLE head cut to the `size` of its own draft ids that are most
    frequent in `order_from`'s training data (`EagleHead.restricted`; with the head's own data,
    its training data's `size` most frequent tokens). ValueError naming draft_vocabs unless
    `size` is below the head's own vocabulary (more tokens need a head trained with that
    `draft_vocab`)."""
    have = len(head.draft_ids)
    if size >= have:
        raise ValueError(
            f"draft_vocabs: the head drafts over {have} tokens, so it can be cut to fewer, not "
            f"to {size} (train a head with configs/heads.py draft_vocab={size})"
        )
    ranked = _frequent_ids(order_from, vocab, vocab, "draft_vocabs", ranked=True)
    own = np.zeros(vocab, bool)
    own[list(head.draft_ids)] = True
    ids = np.sort(ranked[own[ranked]][:size])
    return head.restricted(head_params, ids)


def _frequent_ids(
    workdir: str, vocab_size: int, size: int, name: str, ranked: bool = False
) -> np.ndarray:
    """The `size` most frequent tokens of a trained draft's training data, sorted: from the
    counts its run recorded (`head_token_order`), else from the cached training data
    (`experiments.heads.data.token_order`, a run from before the counts were recorded).
    ValueError naming `name` unless 1 <= size <= vocab. `ranked`: most frequent first, unsorted."""
    from experiments.heads.data import token_order
    from specjax.training.head_run import head_settings, head_token_order

    if not 1 <= size <= vocab_size:
        raise ValueError(
            f"{name}: a draft vocabulary must hold 1 to {vocab_size} tokens; got {size}"
        )
    order = head_token_order(workdir)
    if order is None:
        order = token_order(head_settings(workdir)["data"], vocab_size)
    elif len(order) != vocab_size:
        raise ValueError(
            f"{name}: {workdir} recorded counts of {len(order)} tokens; the target has {vocab_size}"
        )
    return order[:size] if ranked else np.sort(order[:size])
