#!/usr/bin/env bash
# The refine-stage ablation of docs/grpo-ablation.md: which GRPO settings make the quickstart's SFT student better in
# free play. Settings are chosen on train-split seeds only: the student is the quickstart's, trained on
# teacher seeds 0-4799; every row refines it with plain `rhythm grpo`, plays train-split seeds 100000-100099
# in each condition (no teacher week and no refine rollout uses them), and prints `rhythm analyze paired`
# against the SFT student on the same people.
#
#   bash benchmarks/grpo_ablation.sh ROW [ROW...]           # rows: see `case` below; run one after another
#   WORK=/tmp/ablation bash benchmarks/grpo_ablation.sh K    # where the quickstart, models and results go
#
# Rows BEL1, BEL3, FB3, EN2 and EN8 (third and fourth rounds) run on HEAD with benchmarks/grpo_research.patch applied,
# in a git worktree WORK/research (remove it with `git worktree remove WORK/research`); PYTHON names the interpreter
# that has rhythm's dependencies. The rows with several futures or pairs (BD4, P6 ...) ran on that patch's earlier
# switches, which are now `branch.futures`, `branch.group: pair` and `branch.agree_z` (the same reward logs for the
# steps compared, docs/grpo-ablation.md). Rows F... refine the few-teacher-weeks student (configs/quickstart-few.yaml, built once).
#
# The first call runs `rhythm quickstart --set eval_split=train` once (~12 minutes on 2 cores) for the SFT
# student; a row then takes 3-6 minutes on 2 cores (GRPO 1.5-4 min, eval ~1 min).
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=${WORK:-/tmp/rhythm-grpo-ablation}
R=${RHYTHM:-rhythm}
mkdir -p "$WORK"/g "$WORK"/e

[ -f "$WORK/qs/sft/model.safetensors" ] || $R quickstart --out "$WORK/qs" --set eval_split=train --quiet > "$WORK/qs.log" 2>&1
SFT="$WORK/qs/sft"

EVAL_SEEDS=${EVAL_SEEDS:-100000-100099}  # the second round of docs/grpo-ablation.md played 100000-100299
ev() {  # NAME MODEL_DIR: free play on train-split seeds EVAL_SEEDS, every condition
  [ -f "$WORK/e/$1/eval_results_v2.json" ] || $R eval --agent "model:$2" --split train --seeds "$EVAL_SEEDS" --condition all \
    --quiet -o "$WORK/e/$1/eval_results_v2.json" --set 'references=[heuristic]' --set model.max_new_tokens=16 > "$WORK/e/$1.log" 2>&1
}

# The branch stage as the rows before the thirty-eighth round ran it: unanchored (a row's own --set comes after, and wins)
UNANCHORED=(--set anchor_weight=0 --set anchor_states=16)
was() {  # CONFIG: the settings that give CONFIG as rounds 1-37 read it
  [ "$1" = configs/grpo-tiny-branch.yaml ] && echo "${UNANCHORED[@]}" || true
}

grpo() {  # NAME CONFIG [--set key=value ...]: refine the SFT student, then eval and pair with it
  local name=$1 config=$2
  shift 2
  # shellcheck disable=SC2046
  $R grpo --config "$config" --model "${START:-$SFT}" -o "$WORK/g/$name" --quiet --set overwrite_output_dir=true \
    --set logging_steps=5 --set save_steps=1000 $(was "$config") "$@" > "$WORK/g/$name.log" 2>&1
  pair "$name" "$config $*"
}

pair() {  # NAME LABEL: the refined model of row NAME plays EVAL_SEEDS, paired with its SFT student (BASE)
  ev "$1" "$WORK/g/$1"
  echo "== $1: $2"
  $R analyze paired "$WORK/e/${BASE:-sft}/eval_results_v2.episodes.jsonl" "$WORK/e/$1/eval_results_v2.episodes.jsonl"
}

patched() {  # NAME VAR=VALUE... -- [--set key=value ...]: a research row (config PCONFIG), whose code is this commit with
  # benchmarks/grpo_research.patch applied (in a scratch git worktree under WORK); then eval and pair
  local name=$1 tree="$WORK/research" vars=()
  shift
  while [ "$1" != "--" ]; do vars+=("$1"); shift; done
  shift
  [ -d "$tree" ] || { git worktree add -q --detach "$tree" HEAD && git -C "$tree" apply "$PWD/benchmarks/grpo_research.patch"; }
  (cd "$tree" && env "${vars[@]}" PYTHONPATH="$tree" ${PYTHON:-python} -m rhythm.cli.main grpo --config "${PCONFIG:-configs/grpo-tiny-branch.yaml}" \
    --model "${START:-$SFT}" -o "$WORK/g/$name" --quiet --set overwrite_output_dir=true --set logging_steps=5 --set save_steps=1000 \
    $(was "${PCONFIG:-configs/grpo-tiny-branch.yaml}") "$@" > "$WORK/g/$name.log" 2>&1)
  pair "$name" "${vars[*]} $*"
}

ev sft "$SFT"
few() {  # ROW...: run rows on the few-teacher-weeks SFT student (configs/quickstart-few.yaml), paired with it
  [ -f "$WORK/few/sft/model.safetensors" ] || $R quickstart --config configs/quickstart-few.yaml --out "$WORK/few" \
    --set eval_split=train --quiet > "$WORK/few.log" 2>&1
  ev fewsft "$WORK/few/sft"
  START="$WORK/few/sft" BASE=fewsft "$@"
}
STEP=(--set data= --set rollout_seeds=1000-1063 --set num_generations=8 --set per_device_train_batch_size=32 --max-steps 60)
BRANCH=(--set rollout_seeds=1000-1127 --set scale_rewards=group --max-steps 40)
PAIRS=configs/grpo-tiny-pairs.yaml  # fourth round: the greedy action against the runner-up, 6 futures (row FPT2Kh)
for row in "$@"; do
  case $row in
    # step mode on the student's own states: action_value (planner rollouts under the true profile), belief, format
    A) grpo A configs/grpo-tiny.yaml "${STEP[@]}" --set learning_rate=1e-4 ;;
    # branch mode: each reply scored by the week it leads to; only the judged tokens in the loss
    E) grpo E configs/grpo-tiny-branch.yaml "${BRANCH[@]}" --set rollout_seeds=1000-1063 --set learning_rate=1e-4 ;;
    F) grpo F configs/grpo-tiny-branch.yaml "${BRANCH[@]}" --set rollout_seeds=1000-1063 --set learning_rate=3e-5 ;;
    # rows G-J and M oversampled last-step states (branch.last_step_share, last in commit 27b05a7): see docs/grpo-ablation.md
    # advantages scaled by the batch's reward spread, not each group's
    K) grpo K configs/grpo-tiny-branch.yaml "${BRANCH[@]}" --set learning_rate=3e-5 --set scale_rewards=batch ;;
    L) grpo L configs/grpo-tiny-branch.yaml "${BRANCH[@]}" --set learning_rate=1e-4 --set scale_rewards=batch ;;
    N) grpo N configs/grpo-tiny-branch.yaml "${BRANCH[@]}" --set learning_rate=5e-5 --set scale_rewards=batch --max-steps 60 ;;
    # the shipped refine stage, as the quickstart runs it
    Q) grpo Q configs/grpo-tiny-branch.yaml ;;
    # second round (EVAL_SEEDS=100000-100299): a KL anchor to the starting policy on states outside the batch
    # rows R (reward without the week-end belief before the last step) and A1/A2 (greedy belief line, only the
    # action sampled: branch.sample=action, in commit 6fbed74) measured no help and left the code: docs/grpo-ablation.md
    B) grpo B configs/grpo-tiny-branch.yaml --set beta=0.04 ;;
    K2) grpo K2 configs/grpo-tiny-branch.yaml --set anchor_weight=2 ;;
    K20) grpo K20 configs/grpo-tiny-branch.yaml --set anchor_weight=20 ;;
    K5h) grpo K5h configs/grpo-tiny-branch.yaml --set anchor_weight=5 --set learning_rate=1e-4 ;;
    K5long) grpo K5long configs/grpo-tiny-branch.yaml --set anchor_weight=5 --max-steps 120 ;;
    # third round (EVAL_SEEDS=100000-100299): the anchored stage three times longer, then the patched rows
    K5x3) grpo K5x3 configs/grpo-tiny-branch.yaml --set anchor_weight=5 --max-steps 360 ;;
    # thirty-eighth round (EVAL_SEEDS=100000-100299): the branch stage anchored on 16 states, and on 8 (shipped since)
    QA5) grpo QA5 configs/grpo-tiny-branch.yaml --set anchor_weight=5 ;;
    QA5s1) grpo QA5s1 configs/grpo-tiny-branch.yaml --set anchor_weight=5 --set seed=1 ;;
    QA5n8) grpo QA5n8 configs/grpo-tiny-branch.yaml --set anchor_weight=5 --set anchor_states=8 ;;
    QA5n8s1) grpo QA5n8s1 configs/grpo-tiny-branch.yaml --set anchor_weight=5 --set anchor_states=8 --set seed=1 ;;
    QA5n8s2) grpo QA5n8s2 configs/grpo-tiny-branch.yaml --set anchor_weight=5 --set anchor_states=8 --set seed=2 ;;
    # thirty-ninth round (EVAL_SEEDS=100000-100299, on the AMD machine's student): QA5n8, QA5n8s1 and the stage unanchored
    Q0) grpo Q0 configs/grpo-tiny-branch.yaml ;;  # was() gives it rounds 1-37's settings: no anchor
    BEL1) patched BEL1 RHYTHM_JUDGE=belief RHYTHM_MIN_T=8 -- --max-steps 60 --set per_device_train_batch_size=128 ;;
    BD4) grpo BD4 configs/grpo-tiny-branch.yaml --set branch.futures=4 --max-steps 100 ;;
    EN2) patched EN2 RHYTHM_ENUM=1 RHYTHM_MAX_T=26 -- --max-steps 100 --set num_generations=10 \
      --set per_device_train_batch_size=40 --set branch.futures=2 ;;
    EN8) patched EN8 RHYTHM_ENUM=1 RHYTHM_MAX_T=26 -- --max-steps 40 --set num_generations=10 \
      --set per_device_train_batch_size=40 --set learning_rate=1e-4 --set branch.futures=8 ;;
    # fourth round: the belief judged alone at a 10x learning rate; pairs of the greedy action and the runner-up
    BEL3) patched BEL3 RHYTHM_JUDGE=belief RHYTHM_MIN_T=8 -- --max-steps 80 --set per_device_train_batch_size=64 \
      --set learning_rate=3e-4 ;;
    FB3) few patched FB3 RHYTHM_JUDGE=belief RHYTHM_MIN_T=8 -- --max-steps 80 --set per_device_train_batch_size=64 \
      --set learning_rate=3e-4 ;;
    P6) grpo P6 $PAIRS --set learning_rate=1e-4 --set anchor_weight=0 --set branch.agree_z=0 ;;
    P6lo) grpo P6lo $PAIRS --set learning_rate=3e-5 --set anchor_weight=0 --set branch.agree_z=0 ;;
    PT2) grpo PT2 $PAIRS --set learning_rate=1e-4 --set anchor_weight=0 ;;
    PT3) grpo PT3 $PAIRS --set learning_rate=1e-4 --set anchor_weight=0 --set branch.agree_z=3 ;;
    PT2K) grpo PT2K $PAIRS --set learning_rate=1e-4 ;;
    FPT2K) few grpo FPT2K $PAIRS --set learning_rate=1e-4 ;;
    FPT2Kx2) few grpo FPT2Kx2 $PAIRS --set learning_rate=1e-4 --max-steps 150 ;;
    FPT2Kh) few grpo FPT2Kh $PAIRS ;;  # the shipped configs/grpo-tiny-pairs.yaml
    PT2Kh) grpo PT2Kh $PAIRS ;;  # the same on the full-data student
    FPT2Kh1) few grpo FPT2Kh1 $PAIRS --set seed=1 ;;
    FPT2Kh2) few grpo FPT2Kh2 $PAIRS --set seed=2 ;;
    FPD10) few grpo FPD10 $PAIRS --set branch.futures=10 ;;
    # fifth round: the few-weeks quickstart's earlier refine stage on the same people; belief pairs against the truth
    FQ) few grpo FQ configs/grpo-tiny-branch.yaml --max-steps 100 ;;
    FQ1) few grpo FQ1 configs/grpo-tiny-branch.yaml --max-steps 100 --set seed=1 ;;
    FQ2) few grpo FQ2 configs/grpo-tiny-branch.yaml --max-steps 100 --set seed=2 ;;
    FBP1) few patched FBP1 RHYTHM_BPAIR=1 RHYTHM_MIN_T=27 -- --max-steps 64 --set num_generations=2 \
      --set per_device_train_batch_size=32 --set rollout_seeds=5000-6023 --set learning_rate=3e-4 ;;
    FPC3) PCONFIG=$PAIRS few patched FPC3 RHYTHM_CRASH_K=3 -- ;;
    FPC3s1) PCONFIG=$PAIRS few patched FPC3s1 RHYTHM_CRASH_K=3 -- --set seed=1 ;;
    FPC3s2) PCONFIG=$PAIRS few patched FPC3s2 RHYTHM_CRASH_K=3 -- --set seed=2 ;;
    *) echo "unknown row $row" >&2; exit 2 ;;
  esac
done
