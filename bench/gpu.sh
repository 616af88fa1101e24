#!/usr/bin/env bash
# bench/gpu.sh OUT: issue 8's GPU run on one card in about 5 minutes (plus up to COMPILE_LIMIT
# seconds for the compile stage); prints one table at the end and writes it to OUT (markdown).
# Figures of two runs on an H200 are in bench/RESULTS.md.
#
# The GPU machine has no network. Before sending the checkout there, fill the git-ignored
# gpu_data/ (then pass gpu_data as a carried path): the Multi30k files, and pytest's wheels in
# case the image lacks pytest (then installed with --target under $TMPDIR, never into the
# image's environment):
#   mkdir -p gpu_data/multi30k && cp ../shared/data/multi30k/*.gz gpu_data/multi30k/
#   pip download pytest exceptiongroup tomli --only-binary=:all: --python-version 3.10 \
#     --platform any -d gpu_data/wheels
# On the GPU machine, from the repository root (the image has torch, sentencepiece, sacrebleu,
# typer, rich, pyyaml and matplotlib):
#   GPU_LOGS=/tmp/gl bash bench/gpu.sh $OUT/results.md; tar czf $OUT/logs.tgz -C /tmp gl
#
# Stages, each under `timeout`; a failing stage prints FAIL and the others still run:
#   install  pip install --no-deps --no-build-isolation -e .  (else PYTHONPATH=.)
#   tests    pytest -m gpu
#   speed    bench/gpu_bench.py: tokens/s of mtkit's update vs a plain-PyTorch loop, 4 rows
#            (BENCH_ARGS=--profile adds each variant's device-time profile to the log)
#   prep     mtkit prep recipes/en-de.yaml (sentencepiece, binarised data)
#   quality  mtkit train recipes/en-de.yaml for 170 s (a checkpoint every 300 updates, the
#            last 5 averaged), then BLEU on test2016 at beam 5 of best.pt (mtkit score --run)
#            and of averaged.pt
#   decode   mtkit translate test2016 end to end (process start, model load, beam 5 / greedy /
#            beam 5 with --batch-tokens 32000); the floor (python, import torch, first CUDA
#            tensor);
#            bench/translate_speed.py for the search alone (sentences/s) at each of
#            DECODE_BATCH_TOKENS
#   compile  bench/gpu_bench.py again for COMPILE_ROWS: mtkit's update under torch.compile
#   full     only when GPU_ONLY names it: recipes/en-de.yaml as shipped, no time limit, then
#            BLEU on test2016 (the issue's ">= 39 without a time limit"; FULL_LIMIT, 560 s)
#
# Settable: PY (default python, else python3), GPU_LOGS (default runs/gpu-logs), GPU_RUN (the
# run directory, default runs/gpu-en-de; a run there that holds last.pt is not trained again),
# QUALITY_TIME (170s), QUALITY_SET (extra --set overrides for the quality run), GPU_AVERAGE
# (0: no checkpoint averaging), BENCH_ARGS (extra gpu_bench.py arguments, e.g. "--only
# tf256-4k" or "--seconds 3"), GPU_ONLY (some of: tests speed quality decode compile; default
# all), COMPILE_ROWS (gpu_bench.py rows timed under torch.compile in the last stage, default
# tf512), COMPILE_LIMIT (its seconds, 150), DECODE_BATCH_TOKENS (default "8000 32000"),
# MTKIT_DATA_MIRROR (default gpu_data/multi30k).
# GPU_DRY=1: a smoke run of every stage on the CPU (small batches, 20 s of training, 50
# sentences) to check the script itself; its figures mean nothing.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT_FILE="${1:?usage: bash bench/gpu.sh OUT_FILE}"
PY="${PY:-$(command -v python || command -v python3)}"
DRY="${GPU_DRY:-0}"
LOGS="${GPU_LOGS:-runs/gpu-logs}"
RUN="${GPU_RUN:-runs/gpu-en-de}"
QUALITY_TIME="${QUALITY_TIME:-170s}"
export MTKIT_DATA_MIRROR="${MTKIT_DATA_MIRROR:-$PWD/gpu_data/multi30k}"
export PYTHONUNBUFFERED=1
mkdir -p "$LOGS"
LOGS=$(cd "$LOGS" && pwd)
ROWS="$LOGS/rows.md"
: > "$ROWS"
T0=$SECONDS

if [ "$DRY" = 1 ]; then
  DEVICE=cpu
  BENCH=(--device cpu --dry --seconds 0 --warmup 1 --min-steps 2 --only tf256-4k gru256-25k)
  QUALITY_TIME=20s
  TRAIN_DEV=(--set train.device=cpu --set train.threads=2 --set train.valid_every=20)
  CKPT_EVERY=5
  SENTENCES=50
else
  DEVICE=cuda
  BENCH=()
  TRAIN_DEV=(--set train.valid_every=1000)
  CKPT_EVERY=300
  SENTENCES=1000
fi

# The quality run also keeps a checkpoint every CKPT_EVERY updates and averages the last five
# at the end (Vaswani et al. 2017, §6.1); best.pt and averaged.pt are both scored.
AVERAGE=(--set "train.checkpoint_every=$CKPT_EVERY" --set train.keep_last=5
         --set train.average_last=5)
[ "${GPU_AVERAGE:-1}" = 0 ] && AVERAGE=()

want() { [ -z "${GPU_ONLY:-}" ] || [[ " $GPU_ONLY " == *" $1 "* ]]; }
say() { echo "gpu.sh [$((SECONDS - T0)) s] $*" >&2; }
row() { printf '| %s | %s | %s | %s | %s |\n' "$@" >> "$ROWS"; }

# stage NAME LIMIT CMD...: run CMD under timeout; stdout to $LOGS/NAME.out, stderr to
# $LOGS/NAME.log; their last lines (more on failure) go to stderr.
stage() {
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  say "stage $name (limit ${limit} s): $*"
  timeout "$limit" "$@" > "$LOGS/$name.out" 2> "$LOGS/$name.log"
  rc=$?
  STAGE_SECONDS=$((SECONDS - start))
  if [ $rc -eq 0 ]; then
    tail -n 4 "$LOGS/$name.log" "$LOGS/$name.out" >&2
    say "done $name in ${STAGE_SECONDS} s"
  else
    local why="exit $rc"
    [ $rc -eq 124 ] && why="timed out after ${limit} s"
    tail -n 25 "$LOGS/$name.log" "$LOGS/$name.out" >&2
    say "FAIL $name ($why); logs: $LOGS/$name.{log,out}"
    row "$name" "FAIL ($why)" "-" "-" "see $LOGS/$name.log"
  fi
  return $rc
}

# field FILE REGEX: the first group of the last line of FILE matching REGEX (Python re).
field() {
  "$PY" -c 'import re, sys
hits = [m.group(1) for line in open(sys.argv[1]) if (m := re.search(sys.argv[2], line))]
print(hits[-1] if hits else "?")' "$1" "$2"
}

# now: wall-clock seconds with decimals.
now() { date +%s.%N; }
elapsed() {
  "$PY" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$2"
}

# ------------------------------------------------------------------ install, tests
if ! stage install 180 "$PY" -m pip install --no-deps --no-build-isolation -q -e .; then
  export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
  say "install failed: using PYTHONPATH=$PWD"
fi
"$PY" - > "$LOGS/device.txt" <<'EOF'
import datetime, torch
dev = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no CUDA device (CPU)"
print(f"{datetime.date.today()}; {dev}; torch {torch.__version__}; CUDA {torch.version.cuda}")
EOF

run_tests() {
  if ! "$PY" -c "import pytest" 2>/dev/null && [ -d gpu_data/wheels ]; then
    site="${TMPDIR:-/tmp}/mtkit-gpu-site"
    say "no pytest in this Python: installing it from gpu_data/wheels into $site"
    "$PY" -m pip install -q --no-index --find-links gpu_data/wheels --target "$site" pytest \
      && export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
  fi
  if stage tests 240 "$PY" -m pytest -q -m gpu -p no:cacheprovider \
    --continue-on-collection-errors tests; then :; fi
  summary=$(field "$LOGS/tests.out" '^=* *([0-9]+ (?:passed|failed|skipped|error).*?) in [0-9.]+s')
  row "pytest -m gpu" "$summary" "-" "-" "all pass"
}

# ------------------------------------------------------------------ training speed
run_speed() {
  # shellcheck disable=SC2086  # BENCH_ARGS is a list of words
  stage speed 330 "$PY" bench/gpu_bench.py --rows "$ROWS" ${BENCH[@]+"${BENCH[@]}"} \
    ${BENCH_ARGS:-}
}

# ------------------------------------------------------------------ quality per GPU-minute
run_quality() {
  stage prep 240 "$PY" -m mtkit prep recipes/en-de.yaml --run-dir "$RUN" && \
    row "prep recipes/en-de.yaml" "${STAGE_SECONDS} s" "-" "-" "-"
  if [ -f "$RUN/last.pt" ]; then
    say "$RUN already holds a training run: not training again (delete it to retrain)"
  else
    # shellcheck disable=SC2086  # QUALITY_SET is a list of --set KEY=VALUE words
    stage quality 330 "$PY" -m mtkit train recipes/en-de.yaml --run-dir "$RUN" \
      --set "train.max_time=$QUALITY_TIME" --set train.max_epochs=0 "${TRAIN_DEV[@]}" \
      ${AVERAGE[@]+"${AVERAGE[@]}"} ${QUALITY_SET:-}
  fi
  if [ -f "$RUN/metrics.jsonl" ]; then
    "$PY" - "$RUN/metrics.jsonl" "$QUALITY_TIME" >> "$ROWS" <<'EOF'
import json, statistics, sys
recs = [json.loads(line) for line in open(sys.argv[1])]
train = [r for r in recs if r["kind"] == "train"]
end = [r for r in recs if r["kind"] == "end"]
valid = [r for r in recs if r["kind"] == "valid"]
rate = (f"{statistics.median(r['tgt_tokens_per_s'] for r in train) / 1e3:,.1f}k tgt tok/s "
        "(median over log windows)") if train else "no train log line"
upd = end[-1]["update"] if end else (train[-1]["update"] if train else 0)
bleus = [r["bleu"] for r in valid if "bleu" in r]
best = f"{max(bleus):.1f}" if bleus else "-"
print(f"| train loop, recipes/en-de.yaml ({sys.argv[2]}) | {rate}, {upd} updates, "
      f"best valid BLEU {best} | - | - | - |")
EOF
  fi
  if [ -f "$RUN/best.pt" ]; then
    SCORE_DEV=()
    [ "$DRY" = 1 ] && SCORE_DEV=(--device cpu --threads 2)
    if stage score 180 "$PY" -m mtkit score --run "$RUN" --split test2016 --json \
        ${SCORE_DEV[@]+"${SCORE_DEV[@]}"}
    then
      bleu=$("$PY" -c 'import json, sys
print("%.1f" % json.load(open(sys.argv[1]))["systems"][0]["scores"]["BLEU"]["score"])' \
        "$LOGS/score.out" 2>/dev/null || echo "?")
      row "BLEU test2016, beam 5, after $QUALITY_TIME (best.pt)" "$bleu" "JoeyNMT 2.3: 34.8" "-" \
        ">= 38"
    fi
  fi
  if [ -f "$RUN/averaged.pt" ]; then  # train.average_last's model, scored the same way
    AVG_DEV=(--device "$DEVICE")
    [ "$DRY" = 1 ] && AVG_DEV+=(--threads 2)
    if stage translate-avg 120 "$PY" -m mtkit translate "$RUN/averaged.pt" \
        -i "$RUN/data/test2016.src.txt" -o "$LOGS/test2016.averaged.de" "${AVG_DEV[@]}" && \
      stage score-avg 60 "$PY" -m mtkit score -r "$RUN/data/test2016.tgt.txt" \
        "$LOGS/test2016.averaged.de" --json; then
      bleu=$("$PY" -c 'import json, sys
print("%.1f" % json.load(open(sys.argv[1]))["systems"][0]["scores"]["BLEU"]["score"])' \
        "$LOGS/score-avg.out" 2>/dev/null || echo "?")
      row "BLEU test2016, beam 5, after $QUALITY_TIME (averaged.pt, last 5)" "$bleu" \
        "JoeyNMT 2.3: 34.8" "-" ">= 38"
    fi
  fi
  [ -f "$RUN/best.pt" ] || row "BLEU test2016" "FAIL (no $RUN/best.pt)" "JoeyNMT 2.3: 34.8" "-" \
    ">= 38"
  cp "$RUN/metrics.jsonl" "$RUN/train.log" "$LOGS/" 2>/dev/null
}

# ------------------------------------------------------------------ decoding
run_decode() {
  SRC="$RUN/data/test2016.src.txt"
  if [ -f "$RUN/best.pt" ] && [ -f "$SRC" ]; then
    head -n "$SENTENCES" "$SRC" > "$LOGS/test2016.src.txt"
    for method in beam greedy beam-big; do
      flags=(--device "$DEVICE")
      label="beam 5"
      case $method in
        greedy) flags+=(--greedy); label="greedy" ;;
        beam-big) flags+=(--batch-tokens 32000); label="beam 5, --batch-tokens 32000" ;;
      esac
      [ "$DRY" = 1 ] && flags+=(--threads 2)
      t=$(now)
      if stage "translate-$method" 120 "$PY" -m mtkit translate "$RUN" \
          -i "$LOGS/test2016.src.txt" -o "$LOGS/test2016.$method.de" "${flags[@]}"; then
        secs=$(elapsed "$t" "$(now)")
        if [ "$method" = greedy ]; then
          row "translate test2016 ($SENTENCES), $label, end to end" "$secs s" "-" "-" "-"
        else
          row "translate test2016 ($SENTENCES), $label, end to end" "$secs s" \
            "JoeyNMT 2.3: 13.6 s" "-" "<= 4 s"
        fi
      fi
    done
    # What no translation command can avoid: starting Python, importing torch, CUDA init.
    t=$(now)
    if "$PY" -c "import torch; torch.zeros(1, device='$DEVICE')"; then
      row "floor: python + import torch + first $DEVICE tensor" "$(elapsed "$t" "$(now)") s" \
        "-" "-" "-"
    fi
    if [ -f bench/translate_speed.py ]; then
      TS=(--device "$DEVICE" --skip-memory --sentences "$SENTENCES" --batch-tokens
          ${DECODE_BATCH_TOKENS:-8000 32000})
      [ "$DRY" = 1 ] && TS+=(--threads 2)
      if stage decode 180 "$PY" bench/translate_speed.py "$RUN" "${TS[@]}"; then
        for m in "beam 5:2000" "greedy:5000"; do
          name=${m%%:*} target=${m##*:}
          for size in ${DECODE_BATCH_TOKENS:-8000 32000}; do
            rate=$(field "$LOGS/decode.out" "^$name @$size +([0-9.]+) sentences/s")
            row "decode only, $name, batch_tokens $size (translate_speed.py)" \
              "${rate:-?} sentences/s" "-" "-" ">= $target sentences/s"
          done
        done
      fi
    else
      row "decode only (translate_speed.py)" "FAIL (bench/translate_speed.py missing)" "-" "-" "-"
    fi
  else
    row "translate test2016" "FAIL (no trained model or $SRC)" "-" "-" "-"
  fi
}

# ------------------------------------------------------------------ torch.compile, last
# Its compile time is the least predictable part, so it runs after everything else, under its
# own limit: mtkit's update under torch.compile against the same process's plain eager loop.
run_compile() {
  local rows=${COMPILE_ROWS:-tf512}
  if [ "$DRY" = 1 ]; then rows=tf256-4k; fi
  # shellcheck disable=SC2086  # rows is a list of words
  stage compile "${COMPILE_LIMIT:-150}" "$PY" bench/gpu_bench.py --rows "$ROWS" \
    ${BENCH[@]+"${BENCH[@]}"} --only $rows --compile $rows --compiled-only
}

# ------------------------------------------------------------------ the recipe, untimed
# Only when GPU_ONLY names it (about 5 minutes on an H200): recipes/en-de.yaml as shipped (up
# to train.max_epochs, early stopping on validation BLEU), then BLEU on test2016 at beam 5.
run_full() {
  local run="${GPU_FULL_RUN:-runs/gpu-en-de-full}" extra=()
  [ "$DRY" = 1 ] && extra=("${TRAIN_DEV[@]}" --set train.max_updates=20)
  stage full "${FULL_LIMIT:-560}" "$PY" -m mtkit train recipes/en-de.yaml --run-dir "$run" \
    ${extra[@]+"${extra[@]}"}
  if [ -f "$run/best.pt" ]; then
    if stage score-full 180 "$PY" -m mtkit score --run "$run" --split test2016 --json \
        ${SCORE_DEV[@]+"${SCORE_DEV[@]}"}; then
      bleu=$("$PY" -c 'import json, sys
print("%.1f" % json.load(open(sys.argv[1]))["systems"][0]["scores"]["BLEU"]["score"])' \
        "$LOGS/score-full.out" 2>/dev/null || echo "?")
      end=$("$PY" -c 'import json, sys
e = [json.loads(x) for x in open(sys.argv[1])][-1]
print("%s at update %s, %.0f s" % (e.get("reason"), e.get("update"), e.get("elapsed", 0)))' \
        "$run/metrics.jsonl" 2>/dev/null || echo "?")
      row "BLEU test2016, beam 5, recipe untimed ($end)" "$bleu" "-" "-" ">= 39"
    fi
  fi
}

SCORE_DEV=()
[ "$DRY" = 1 ] && SCORE_DEV=(--device cpu --threads 2)

want tests && run_tests
want speed && run_speed
want quality && run_quality
want decode && run_decode
want compile && run_compile
[[ " ${GPU_ONLY:-} " == *" full "* ]] && run_full

# ------------------------------------------------------------------ the table
{
  echo "# mtkit GPU benchmarks (bench/gpu.sh)"
  echo
  echo "$(cat "$LOGS/device.txt" 2>/dev/null || echo "device unknown")"
  [ "$DRY" = 1 ] && echo "GPU_DRY=1: a CPU smoke run of the script; the figures mean nothing."
  echo "total $((SECONDS - T0)) s; logs in $LOGS"
  echo
  echo "| measurement | mtkit | baseline | ratio | target |"
  echo "| --- | --- | --- | --- | --- |"
  cat "$ROWS"
} > "$OUT_FILE.tmp" && mv "$OUT_FILE.tmp" "$OUT_FILE"
cat "$OUT_FILE"
