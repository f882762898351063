#!/usr/bin/env bash
# Recreates the model zoo: for each corpus, the target, three drafts, the distilled draft, the
# n-gram tables, and the alpha table. Checkpoints go to runs/<name> (git-ignored); the final
# parameters to ~/.cache/specjax/models ($SPECJAX_CACHE overrides), where experiments find them.
#
#   scripts/train_zoo.sh                       # python corpus (about 1.5-3 h on a 2-core CPU)
#   scripts/train_zoo.sh python shakespeare    # both corpora
#   MODELS="draft_l draft_s" TARGET=draft_l scripts/train_zoo.sh shakespeare   # a small pair
#
# Every step resumes where it stopped if the script is interrupted and started again, and a
# finished run only re-evaluates and re-exports (minutes), so re-running is cheap.
set -euo pipefail
cd "$(dirname "$0")/.."

MODELS=${MODELS:-"target draft_l draft_m draft_s"}
TARGET=${TARGET:-target}
DISTILL=${DISTILL:-draft_m}
# Distillation starts, space-separated: "data" (fine-tune the data-trained draft for a third of
# its steps: the default, and the better draft) and/or "scratch" (random init, full steps).
DISTILL_INITS=${DISTILL_INITS:-data}
CORPORA=("$@")
if [ ${#CORPORA[@]} -eq 0 ]; then CORPORA=(python); fi

for corpus in "${CORPORA[@]}"; do
  if [ "$corpus" = shakespeare ]; then python scripts/fetch_shakespeare.py; fi
  for model in $MODELS; do
    python -m experiments.main --config="configs/train.py:model=$model,corpus=$corpus"
  done
  if [ -n "$DISTILL" ]; then
    for init in $DISTILL_INITS; do
      opt=""
      if [ "$init" = data ]; then opt=",init=data"; fi
      python -m experiments.main \
        --config="configs/train.py:model=$DISTILL,corpus=$corpus,distill=$TARGET,objective=tv$opt"
    done
  fi
  python scripts/zoo_alpha.py --corpus="$corpus" --target="$TARGET" \
    --json_out="runs/zoo-$corpus.json"
done
