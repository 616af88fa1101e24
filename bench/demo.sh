#!/usr/bin/env bash
# `make demo`: the main job end to end on Multi30k English->German, and what mtkit shows of it:
#   prep -> train -> translate test2016 and score it (BLEU and chrF with sacreBLEU signatures)
#   -> five translations beside their references -> one sentence's attention, in the terminal
#   and as a heatmap PNG -> the commands to go on with.
# On a GPU it trains recipes/en-de.yaml in full (about 3 minutes on an H200); without one it
# trains recipes/en-de-cpu.yaml, sized for a 10-minute budget on 2 cores (DEMO_TIME=30m for
# longer). Either way the run is runs/en-de-multi30k, the one the README's examples name.
# Settable: RECIPE, RUN (default runs/en-de-multi30k; with RECIPE, runs/<recipe name>),
# DEMO_TIME, SPLIT (the test set translated and scored, default test2016), MTKIT_DATA_MIRROR
# (default ../shared/data/multi30k when it exists, else download).
# A run directory that already holds a model is not trained again: delete it to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
MTKIT="${MTKIT:-.venv/bin/mtkit}"
PY="${PY:-.venv/bin/python}"
export MTKIT_DATA_MIRROR="${MTKIT_DATA_MIRROR:-$(cd .. && pwd)/shared/data/multi30k}"
[ -d "$MTKIT_DATA_MIRROR" ] || unset MTKIT_DATA_MIRROR   # fall back to downloading
say() { echo "demo: $*" >&2; }
start=$SECONDS

budget=()
own_recipe="${RECIPE:-}"
if "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"; then
  RECIPE="${RECIPE:-recipes/en-de.yaml}"
  [ -n "${DEMO_TIME:-}" ] && budget=(--set "train.max_time=$DEMO_TIME")
  say "GPU found: training $RECIPE"
else
  RECIPE="${RECIPE:-recipes/en-de-cpu.yaml}"
  budget=(--set "train.max_time=${DEMO_TIME:-10m}")
  say "no GPU found: training $RECIPE for ${DEMO_TIME:-10m} of wall-clock on the CPU"
fi
if [ -n "$own_recipe" ]; then
  name=$("$PY" -c "import sys; from mtkit.config import load_recipe; print(load_recipe(sys.argv[1]).name)" "$RECIPE")
else
  name=en-de-multi30k  # the GPU recipe's name, for the CPU recipe too: one run name to follow
fi
RUN="${RUN:-runs/$name}"

say "1/4 prep $RECIPE into $RUN"
t=$SECONDS
$MTKIT prep "$RECIPE" --run-dir "$RUN"
say "prep took $((SECONDS - t)) s"

t=$SECONDS
if [ -f "$RUN/best.pt" ]; then
  say "2/4 train: $RUN already holds a model; not training again"
else
  say "2/4 train"
  $MTKIT train "$RECIPE" --run-dir "$RUN" ${budget[@]+"${budget[@]}"}
fi
say "train took $((SECONDS - t)) s"

t=$SECONDS
SPLIT="${SPLIT:-test2016}"
say "3/4 translate $SPLIT with the run's model (best.pt, or averaged.pt where it validated better; beam 5) and score it"
$MTKIT score --run "$RUN" --split "$SPLIT" --metrics bleu,chrf
hyp=$(ls -t "$RUN"/translations/"$SPLIT".*.txt | head -n 1)
say "translation and scoring took $((SECONDS - t)) s"

echo
echo "Five translations of $SPLIT (source / reference / mtkit), from $hyp:"
for i in 1 2 3 4 5; do
  echo "  en:   $(sed -n "${i}p" "$RUN/data/$SPLIT.src.txt")"
  echo "  ref:  $(sed -n "${i}p" "$RUN/data/$SPLIT.tgt.txt")"
  echo "  mtkit: $(sed -n "${i}p" "$hyp")"
  echo
done

say "4/4 attention of the model for the first sentence and its translation"
pair="$RUN/demo"
mkdir -p "$pair"
head -n 1 "$RUN/data/$SPLIT.src.txt" > "$pair/sentence.en"
head -n 1 "$hyp" > "$pair/sentence.de"
# The heatmap's own folder: align writes only into an empty folder or one of its heatmaps.
$MTKIT align "$RUN" -s "$pair/sentence.en" -t "$pair/sentence.de" --print \
  --heatmap "$pair/heatmap"
echo "heatmap: $pair/heatmap/align-0000.png"

cat <<EOF

Done in $((SECONDS - start)) s. Go on with the trained run:
  $MTKIT translate $RUN -i my.en -o my.de --beam 5        # translate a file (or stdin)
  $MTKIT translate $RUN --format jsonl --nbest 3 --align < my.en
  $MTKIT align $RUN -s my.en -t my.de --print --heatmap maps/   # attention as alignment
  $MTKIT score -r $RUN/data/$SPLIT.tgt.txt $hyp --paired-bs other.de   # compare systems
  $MTKIT tune-length $RUN                                # choose the length penalty on valid
  $MTKIT train $RECIPE --run-dir $RUN --resume --set train.max_time=20m   # train on
EOF
