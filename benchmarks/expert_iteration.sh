#!/usr/bin/env bash
# One round of expert iteration from the environment alone, through the existing stages:
#   bash benchmarks/expert_iteration.sh STUDENT TEACHER_DATA OUT [SEEDS] [K] [--set key=value ...]
# 1. `rhythm eval` plays STUDENT on train-split in-dist people SEEDS (default 5000-5511: no quickstart teacher
#    week played them) greedily once and K times (default 8) sampled at temperature 1 (seeds 1..K);
# 2. `python benchmarks/own_weeks.py best` (rhythm sft on benchmarks/configs/own-weeks-best.yaml) learns, per
#    person, the best scored of those weeks beside TEACHER_DATA (the weeks STUDENT was distilled from), continuing
#    STUDENT -> OUT/sft.
# Extra arguments go to rhythm sft's --set. docs/grpo-ablation.md ("Expert iteration") has the figures.
# VARIANT=filter learns the same plays as DAgger for the belief instead (every week, its beliefs replaced by the
# bayes filter's; benchmarks/configs/own-weeks-filter.yaml; docs/grpo-ablation.md, ninth round). On the full-data quickstart
# student, ~3 min on 2 cores, +0.010 to +0.014 in-dist on the eval split in 3 seeds (docs/grpo-ablation.md, round 13):
#   VARIANT=filter bash benchmarks/expert_iteration.sh runs/quickstart/sft runs/quickstart/data/teacher.jsonl OUT \
#       5512-6023 2 --set max_steps=120 --set learning_rate=1e-3
set -euo pipefail
[ $# -ge 3 ] || { echo "usage: $0 STUDENT TEACHER_DATA OUT [SEEDS] [K] [--set key=value ...]" >&2; exit 2; }
STUDENT=$1 TEACHER=$2 OUT=$3; shift 3
SEEDS=5000-5511 K=8
[ $# -gt 0 ] && [[ $1 != --* ]] && { SEEDS=$1; shift; }
[ $# -gt 0 ] && [[ $1 != --* ]] && { K=$1; shift; }
RHYTHM=${RHYTHM:-rhythm} PYTHON=${PYTHON:-python} VARIANT=${VARIANT:-best}
HERE=$(cd "$(dirname "$0")" && pwd)
play() {  # play NAME [--set ...]: the student's weeks of SEEDS -> OUT/own/NAME
  [ -f "$OUT/own/$1/eval_results_v2.json" ] || $RHYTHM eval --agent "model:$STUDENT" --split train --seeds "$SEEDS" \
    --condition in-dist --quiet -o "$OUT/own/$1/eval_results_v2.json" --set 'references=[]' --set model.max_new_tokens=16 "${@:2}" >&2
}
play g
data="$TEACHER,$OUT/own/g/eval_results_v2.episodes.jsonl"
for k in $(seq 1 "$K"); do
  play "s$k" --set model.do_sample=true --set model.temperature=1.0 --set model.seed="$k"
  data="$data,$OUT/own/s$k/eval_results_v2.episodes.jsonl"
done
$PYTHON "$HERE/own_weeks.py" "$VARIANT" -- --config "${CONFIG:-$HERE/configs/own-weeks-$VARIANT.yaml}" \
  --set model_name_or_path="$STUDENT" --set data="$data" --set output_dir="$OUT/sft" "$@"
