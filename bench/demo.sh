#!/usr/bin/env bash
# `make demo`: the main job end to end on Multi30k English->German:
#   prep -> train -> translate test2016 -> score it (BLEU, chrF, TER with signatures).
# Without a GPU, training is capped by a wall-clock budget (DEMO_TIME, default 10m) so the
# demo finishes in minutes, far from convergence; with a GPU the recipe trains fully.
# Settable: RECIPE (default recipes/en-de.yaml), RUN (default runs/<recipe name>), DEMO_TIME,
# MTKIT_DATA_MIRROR (default ../shared/data/multi30k when it exists, else download).
# A run directory that already holds a model is not trained again: delete it to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
MTKIT="${MTKIT:-.venv/bin/mtkit}"
PY="${PY:-.venv/bin/python}"
RECIPE="${RECIPE:-recipes/en-de.yaml}"
export MTKIT_DATA_MIRROR="${MTKIT_DATA_MIRROR:-$(cd .. && pwd)/shared/data/multi30k}"
[ -d "$MTKIT_DATA_MIRROR" ] || unset MTKIT_DATA_MIRROR   # fall back to downloading

name=$("$PY" -c "import sys; from mtkit.config import load_recipe; print(load_recipe(sys.argv[1]).name)" "$RECIPE")
RUN="${RUN:-runs/$name}"
say() { echo "demo: $*" >&2; }
start=$SECONDS

budget=()
if ! "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  budget=(--set "train.max_time=${DEMO_TIME:-10m}")
  say "no GPU found: training for ${DEMO_TIME:-10m} of wall-clock on the CPU"
fi

say "1/3 prep $RECIPE into $RUN"
$MTKIT prep "$RECIPE" --run-dir "$RUN"

if [ -f "$RUN/best.pt" ]; then
  say "2/3 train: $RUN already holds a model (best.pt); not training again"
else
  say "2/3 train"
  $MTKIT train "$RECIPE" --run-dir "$RUN" ${budget[@]+"${budget[@]}"}
fi

say "3/3 translate test2016 with the best checkpoint and score it"
$MTKIT score --run "$RUN" --split test2016

hyp=$(ls -t "$RUN"/translations/test2016.*.txt | head -n 1)
say "first sentences (source / reference / translation in $hyp):"
paste -d '\n' <(head -n 3 "$RUN/data/test2016.src.txt") <(head -n 3 "$RUN/data/test2016.tgt.txt") \
  <(head -n 3 "$hyp") <(printf '\n\n\n') | sed 's/^/  /'
say "done in $((SECONDS - start)) s"
