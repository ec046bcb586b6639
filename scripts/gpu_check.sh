#!/usr/bin/env bash
# Every GPU check and benchmark in one command, and one report (issue 24):
#
#   bash scripts/gpu_check.sh [--dry-run] [OUT]        (OUT default: runs/gpu_check in the repository)
#
# Runs, each with its log in OUT/<step>.log and its exit status in OUT/steps.tsv:
#   data           vp-gen rigid_body_paper (only when datasets/rigid_body_paper.h5 is missing)
#   pytest_gpu     python -m pytest -m gpu (JUnit: OUT/pytest_gpu.xml)
#   bench_train    paper VPT, Adam, batch 16384, float32 per fast_step auto, off, compile (target >= 300 epochs/s)
#   bench_ensemble ensembles of 1, 8, 64 seeds (target: 64 seeds >= 5000 model-epochs/s)
#   bench_rollout  part (d): 10^4, 10^5, 10^6 initial conditions on the device, with and without the volume
#                  (target: 10^6 ICs >= 1e9 state-steps/s; the whole run_rollouts at the speed of its file I/O)
#   lm_cuda        configs/rigid_body_vpt_lm.toml on CUDA (target: training loss <= 5e-4)
#   ddp_nccl       torchrun --nproc_per_node=1 scripts/ddp_check.py: the DDP path through NCCL against one process
# then writes OUT/gpu_report.md (scripts/gpu_report.py): each figure beside its target, each GPU test's outcome.
# Exit status: 0 when every step exited 0 and no GPU test failed; 1 otherwise; 2 without a CUDA device (nothing
# is run; --dry-run prints the steps, one "name<TAB>command" line each, and runs nothing).
# Environment: PYTHON (default python), GPU_CHECK_STEP_TIMEOUT (seconds per step, default 3600).
set -u
DRY=""
OUT=""
for arg in "$@"; do
    case "$arg" in
        --dry-run) DRY=1 ;;
        -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        -*) echo "gpu_check: unknown option $arg (use --dry-run or -h)" >&2; exit 2 ;;
        *) [[ -z "$OUT" ]] || { echo "gpu_check: one OUT directory only (got $OUT and $arg)" >&2; exit 2; }
           OUT=$arg ;;
    esac
done
REPO=$(cd "$(dirname "$0")/.." && pwd) || exit 1
OUT=$(realpath -m "${OUT:-$REPO/runs/gpu_check}")  # relative to where it was called from
cd "$REPO" || exit 1
PY=${PYTHON:-python}
LIMIT=${GPU_CHECK_STEP_TIMEOUT:-3600}
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's vpintegrator, whatever is installed

step() {  # step NAME CMD...: run CMD, its output in OUT/NAME.log, a line in OUT/steps.tsv (--dry-run: print it)
    local name=$1 cmd rc t0
    shift
    printf -v cmd '%q ' "$@"
    cmd=${cmd% }
    if [[ -n "$DRY" ]]; then
        printf '%s\t%s\n' "$name" "$cmd"
        return
    fi
    echo "gpu_check: $name: $cmd" >&2
    t0=$SECONDS
    timeout --kill-after=30 "$LIMIT" "$@" >"$OUT/$name.log" 2>&1
    rc=$?
    printf '%s\t%d\t%d\t%s\n' "$name" "$rc" $((SECONDS - t0)) "$cmd" >>"$OUT/steps.tsv"
    echo "gpu_check: $name: exit $rc after $((SECONDS - t0)) s" >&2
}

if [[ -z "$DRY" ]]; then
    if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
        echo "gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing was run." \
             "Run it on a machine with a GPU; --dry-run prints the steps." >&2
        exit 2
    fi
    mkdir -p "$OUT"
    rm -rf "$OUT/runs" "$OUT/rollout_tmp" "$OUT/steps.tsv" "$OUT/pytest_gpu.xml" "$OUT/gpu_report.md"
    mkdir -p "$OUT/runs" "$OUT/rollout_tmp"
fi

if [[ -n "$DRY" || ! -f datasets/rigid_body_paper.h5 ]]; then
    step data "$PY" -m vpintegrator.cli.gen rigid_body_paper --no-progress
fi
step pytest_gpu "$PY" -m pytest -m gpu -q -rA -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml"
step bench_train "$PY" scripts/bench_train.py --device cuda --fast-steps auto,off,compile
step bench_ensemble "$PY" scripts/bench_ensemble.py --device cuda --sizes 1 8 64
step bench_rollout "$PY" scripts/bench_rollout.py --device cuda --skip a,a2,b,c --max-ics 1000000 \
    --workdir "$OUT/rollout_tmp"
step lm_cuda "$PY" -m vpintegrator.cli.train configs/rigid_body_vpt_lm.toml --device cuda \
    --out "$OUT/runs/lm_cuda" --no-progress
step ddp_nccl "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 scripts/ddp_check.py \
    --device cuda --out "$OUT/runs/ddp"

[[ -n "$DRY" ]] && exit 0
"$PY" scripts/gpu_report.py "$OUT"
