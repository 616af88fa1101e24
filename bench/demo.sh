#!/usr/bin/env bash
# `make demo`: the main job end to end on Multi30k English->German.
#   prep -> train -> translate test2016 -> score.
# Without a GPU the training run is capped by a wall-clock budget (DEMO_TIME, default 10m) so
# the demo finishes in minutes; with a GPU the recipe trains fully.
set -euo pipefail
cd "$(dirname "$0")/.."
MTKIT=".venv/bin/mtkit"
RECIPE="${RECIPE:-recipes/en-de.yaml}"
export MTKIT_DATA_MIRROR="${MTKIT_DATA_MIRROR:-$(cd .. && pwd)/shared/data/multi30k}"
[ -d "$MTKIT_DATA_MIRROR" ] || unset MTKIT_DATA_MIRROR   # fall back to downloading

RUN="runs/$(.venv/bin/python -c "import sys,yaml;print(yaml.safe_load(open(sys.argv[1]))['name'])" "$RECIPE")"
budget=()
if ! .venv/bin/python -c "import torch,sys;sys.exit(0 if torch.cuda.is_available() else 1)"; then
  budget=(--set "train.max_time=${DEMO_TIME:-10m}")
  echo "demo: no GPU found; training for ${DEMO_TIME:-10m} of wall-clock on the CPU" >&2
fi

$MTKIT prep "$RECIPE"
$MTKIT train "$RECIPE" "${budget[@]}"
zcat -f "$RUN/data/test2016.src.txt" 2>/dev/null > /dev/null || true
$MTKIT score --run "$RUN" --split test2016
