#!/usr/bin/env bash
# The tiny-student ablation of docs/student.md: which training gets a from-scratch student to infer the
# person in free play. Every row is plain `rhythm generate | sft | eval` (train-split seeds only: teacher
# data 0..N-1, free-play evaluation on seeds 100000-100099, which no teacher data uses).
#
#   bash benchmarks/student_grid.sh ROW [ROW...]      # rows: see `case` below; runs them in parallel
#   WORK=/tmp/grid bash benchmarks/student_grid.sh Q   # where data, models and results go
#   PYTHON=.venv/bin/python RHYTHM=.venv/bin/rhythm bash benchmarks/student_grid.sh Q   # without the venv on PATH
#
# The rows were run on one GPU (an H100, all rows of one group side by side: minutes); on 2 CPU cores a
# quickstart-sized row takes ~10-20 minutes and sft-small's row G about two hours. Results print one line
# per condition: final v3 score with its 95% CI, the heuristic's and bayes's, the paired win rate against
# the heuristic, and the free-play belief MAE at steps 1, 4, 8, 16 and 28 beside the constant prior's.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/rhythm-grid}
R=${RHYTHM:-rhythm}
PY=${PYTHON:-python}
mkdir -p "$WORK"/m "$WORK"/r "$WORK"/e

data() {  # N weeks of the bayes teacher, in-dist, train split: $WORK/tN.jsonl
  [ -f "$WORK/t$1.jsonl" ] || $R generate --seeds "0-$(( $1 - 1 ))" --output "$WORK/t$1.jsonl" --concurrency "${CONCURRENCY:-2}" --quiet
}

model() {  # tiny students outside the named ones: base = 4 layers without numeric init, h64 = hidden 64
  $PY - "$WORK/m" <<'PY'
import sys
from pathlib import Path
from rhythm.agents.tiny import protocol_corpus
from rhythm.model.tiny import TinySpec, build_tiny_student
specs = {"base": TinySpec(num_hidden_layers=4, numeric_init=False), "h64": TinySpec(num_hidden_layers=4, hidden_size=64, intermediate_size=256)}
for name, spec in specs.items():
    if not (Path(sys.argv[1]) / name / "rhythm_tiny.json").exists():
        build_tiny_student(Path(sys.argv[1]) / name, protocol_corpus(spec), spec)
PY
}

sft() {  # NAME MODEL DATA STEPS BATCH FIRST_TURNS [LR [--set key=value ...]]
  $R sft --config configs/sft-tiny.yaml --model "$2" --data "$3" -o "$WORK/r/$1" --quiet --set max_steps="$4" \
    --set per_device_train_batch_size="$5" --set first_turns="$6" --set learning_rate="${7:-3e-3}" \
    --set save_steps=100000 --set eval_steps=100000 "${@:8}" > "$WORK/r/$1.log" 2>&1
}

stage2() {  # NAME STEPS [--set key=value ...]: whole weeks (batch 8, lr 1e-3) from Q's stage 1 (row Q first)
  sft "$1" "$WORK/r/Qa" "$WORK/t4800.jsonl" "$2" 8 null 1e-3 "${@:3}" && ev "$1" all
}

ev() {  # NAME [CONDITION]: free play on train-split seeds 100000-100099
  $R eval --agent "model:$WORK/r/$1" --split train --seeds 100000-100099 --condition "${2:-in-dist}" --quiet \
    -o "$WORK/e/$1/eval_results_v2.json" --set 'references=[heuristic,bayes]' --set model.max_new_tokens=16 > "$WORK/e/$1.log" 2>&1
  $PY - "$1" "$WORK/e/$1/eval_results_v2.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
for cond, d in json.load(open(path))["conditions"].items():
    b, refs = d["belief_mae_by_step"], d["references"]
    at = " ".join(f"{(b[i] or 0):.3f}" for i in (0, 3, 7, 15, len(b) - 1))
    print(f"{name:4s} {cond:9s} v3 {d['final_score']['mean']:.3f} {d['final_score']['ci95']} heuristic {refs['heuristic']['final_score']:.3f} "
          f"bayes {refs['bayes']['final_score']:.3f} win {d['win_rate_vs']['heuristic']:.2f} prior {d['belief_mae_prior']:.3f} mae@1/4/8/16/28 {at}")
PY
}

two_stage() {  # NAME MODEL STEPS1 BATCH1 FIRST_TURNS STEPS2: openings, then whole weeks (batch 8)
  sft "${1}a" "$2" "$WORK/t4800.jsonl" "$3" "$4" "$5" && ev "${1}a"
  sft "${1}b" "$WORK/r/${1}a" "$WORK/t4800.jsonl" "$6" 8 null && ev "${1}b"
}

row() {
  case "$1" in
    # whole weeks only, 4,800 weeks of data, from scratch (4 layers unless named)
    A) sft A "$WORK/m/base" "$WORK/t4800.jsonl" 300 8 null && ev A ;;          # no numeric init, 2,400 weeks seen
    B) sft B rhythm-tiny-4l "$WORK/t4800.jsonl" 300 8 null && ev B ;;          # numeric init
    C) sft C rhythm-tiny-4l "$WORK/t4800.jsonl" 600 8 null && ev C ;;          # 4,800 weeks seen
    D) sft D "$WORK/m/base" "$WORK/t4800.jsonl" 600 8 null && ev D ;;
    E) sft E rhythm-tiny-4l "$WORK/t4800.jsonl" 300 8 null 6e-3 && ev E ;;     # lr 6e-3
    F) sft F "$WORK/m/h64" "$WORK/t4800.jsonl" 600 8 null && ev F ;;           # hidden 64
    H) sft H rhythm-tiny "$WORK/t4800.jsonl" 600 8 null && ev H ;;             # 2 layers
    R) sft R rhythm-tiny-4l "$WORK/t4800.jsonl" 600 4 null && ev R ;;          # batch 4: twice the updates
    # openings curriculum: stage 1 on each week's first turns, stage 2 on 480 whole weeks
    P1) two_stage P1 rhythm-tiny-4l 300 27 8 60 ;;
    P2) two_stage P2 rhythm-tiny-4l 300 50 4 60 ;;
    P3) two_stage P3 rhythm-tiny-4l 600 27 8 60 ;;
    S) two_stage S rhythm-tiny-4l 150 16 14 60 ;;
    Q) two_stage Q rhythm-tiny 600 27 8 60 ;;                                   # the quickstart's recipe until 2026-11-23
    # stage 2 after Q's stage 1 (run row Q first): learning rate, schedule, steps. Rows QN, QS (context_noise)
    # and QX (the exploring teacher) ran knobs since removed; commit 6d1824e is the last that runs them.
    Q60) stage2 Q60 60 ;;                                                        # lr 1e-3 constant
    Q120) stage2 Q120 120 --set lr_scheduler_type=cosine ;;
    Q120c) stage2 Q120c 120 ;;                                                   # constant
    Q120c5) stage2 Q120c5 120 --set learning_rate=5e-4 ;;                        # constant, lr 5e-4
    Q180) stage2 Q180 180 --set lr_scheduler_type=cosine ;;
    # GRPO (episode mode, 12 steps) from Q120 with a per-turn belief reward beside the week's score (row Q120 first)
    QG1|QG3) $R grpo --config configs/grpo-tiny-episode.yaml --data "$WORK/t4800.jsonl" --model "$WORK/r/Q120" --set adapter=null \
         -o "$WORK/r/$1" --quiet --set 'reward_funcs=[final_score,belief,format]' --set 'reward_weights=[1.0,1.0,0.1]' \
         --set learning_rate="${1: -1}e-4" > "$WORK/r/$1.log" 2>&1 && ev "$1" all ;;
    # a longer stage 1 (800 steps of 27 eight-turn openings), then 120 or 60 cosine steps of whole weeks
    O) sft Oa rhythm-tiny "$WORK/t4800.jsonl" 800 27 8 && for n in 120 60; do
         sft "O$n" "$WORK/r/Oa" "$WORK/t4800.jsonl" "$n" 8 null 1e-3 --set lr_scheduler_type=cosine && ev "O$n" all; done ;;
    # the quickstart's recipe now: row O's stage 1 with the observations in the loss at W (OBS10: 0.1,
    # OBS30: 0.3, OBS100: 1.0), then O120's stage 2; SEED=1 for the second seed (docs/student.md, "Seeing the meters")
    OBS10|OBS30|OBS100) w=$(awk "BEGIN { print ${1#OBS} / 100 }"); s=${SEED:-0}
         sft "${1}a$s" rhythm-tiny "$WORK/t4800.jsonl" 800 27 8 3e-3 --set observation_loss="$w" --set seed="$s" &&
         sft "${1}s$s" "$WORK/r/${1}a$s" "$WORK/t4800.jsonl" 120 8 null 1e-3 --set lr_scheduler_type=cosine --set seed="$s" &&
         ev "${1}s$s" all ;;
    # the quickstart's recipe since the echo: OBS10 with each observation's echoed action name at 1 (echo_loss)
    ECHO) s=${SEED:-0}
         sft "ECHOa$s" rhythm-tiny "$WORK/t4800.jsonl" 800 27 8 3e-3 --set observation_loss=0.1 --set echo_loss=1.0 --set seed="$s" &&
         sft "ECHOs$s" "$WORK/r/ECHOa$s" "$WORK/t4800.jsonl" 120 8 null 1e-3 --set lr_scheduler_type=cosine --set seed="$s" &&
         ev "ECHOs$s" all ;;
    # configs/sft-small.yaml: 4 layers, 32,000 whole weeks (bs 16 x 2,000) from 12,000
    G) data 12000 && $R sft --config configs/sft-small.yaml --data "$WORK/t12000.jsonl" -o "$WORK/r/G" --quiet \
         --set observation_loss=0 --set echo_loss=0 \
         > "$WORK/r/G.log" 2>&1 && ev G all ;;
    # scale: whole weeks, 4 layers without numeric init, batch 64, read at 16,000 / 32,000 / 48,000 weeks seen
    W) data 16000 && $R sft --config configs/sft-tiny.yaml --model "$WORK/m/base" --data "$WORK/t16000.jsonl" -o "$WORK/r/W" \
         --quiet --set max_steps=750 --set per_device_train_batch_size=64 --set first_turns=null --set save_steps=250 \
         --set save_total_limit=10 > "$WORK/r/W.log" 2>&1 && for n in 250 500 750; do
         ln -sfn "$WORK/r/W/checkpoint-$n" "$WORK/r/W$n" && ev "W$n"; done ;;
    *) echo "unknown row $1" >&2; return 2 ;;
  esac
}

ROWS=" A B C D E F H R P1 P2 P3 S Q Q60 Q120 Q120c Q120c5 Q180 QG1 QG3 O OBS10 OBS30 OBS100 ECHO G W "
for r in "$@"; do  # before any data is made (ROWS: the labels of row's case, kept in step with it)
  [[ "$ROWS" == *" $r "* ]] || { echo "unknown row $r (rows:$ROWS)" >&2; exit 2; }
done
data 4800
model
pids=()
for r in "$@"; do row "$r" & pids+=($!); done
failed=0
for i in "${!pids[@]}"; do  # each row's exit status: one that fails fails the grid (its log is in $WORK/r, $WORK/e)
  wait "${pids[$i]}" || { echo "row ${*:$((i + 1)):1} failed" >&2; failed=1; }
done
exit "$failed"
