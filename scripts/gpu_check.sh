#!/usr/bin/env bash
# The GPU checks and benchmarks as self-contained steps, each within one call of a lent device (issue 47):
#
#   bash scripts/gpu_check.sh --list                      the steps in order: name, time limit, files, what
#   bash scripts/gpu_check.sh --groups                    the groups: name, steps, their limits together, what
#   bash scripts/gpu_check.sh --group NAME [--out DIR]    one group: the steps that fit one device call together
#   bash scripts/gpu_check.sh --only STEP[,STEP...] [--out DIR] [--smoke] [--dry-run]
#   bash scripts/gpu_check.sh --all [--out DIR]           every step, then the report (a machine of one's own)
#   bash scripts/gpu_check.sh --plan ten-minutes [--out DIR] [--smoke] [--dry-run]
#                                                         the issue's figures in one ten-minute call, one log
#   bash scripts/gpu_check.sh --plans                     the plans' steps: plan, step, time limit, what
#   python scripts/gpu_report.py DIR                      the report from the files of every call, put together
#
# Each step makes its own small data (in a temporary directory, removed after), warms its own caches (numba,
# TorchScript, CUDA graphs, Triton/torch.compile) inside its own time limit, and writes at most 3 files into
# the output directory: STEP.log (everything it printed, after a header naming the machine), STEP.tsv (one
# line: name, exit status, seconds, limit, commands) and, for some steps, one more (pytest_gpu.xml,
# lm_cuda.csv). A step past its limit is killed with its process group (exit 124 in STEP.tsv; the log keeps
# what it printed, Python runs unbuffered). Steps named together run one after the other and must fit one
# device call: their limits add up to at most GPU_CHECK_BUDGET seconds (default 570) and their files to at
# most 8, or nothing runs. A lent machine's session has 15 minutes of device time, its start included, so one
# group (--groups) per session: figures first, then tests, extras, compile, io.
# --out DIR: default $OUT when set (the device tool's folder that comes back), else runs/gpu_check.
# A plan (--plan NAME) is steps run one after the other into ONE log, printed as it goes (tee: the device
# tool's output tail shows it too): OUT/NAME.log, OUT/NAME.tsv (a status line per step) and at most one more
# file (f64_graph's JUnit). Its limits add up to at most 540 s (a test holds it) and no step of it may build a
# torch.compile step (TORCH_COMPILE_DISABLE=1 for all of them: inductor's build filled a 500-s call).
# --smoke: the steps' own commands on the CPU at toy sizes (checks the plumbing on a machine without a GPU;
#          no figure of a smoke run means anything). --dry-run: print "STEP<TAB>command" per command, run nothing.
# Exit status: 0 when every step named exited 0; 1 otherwise; 2 on a usage error or, without --smoke or
# --dry-run, on a machine without CUDA (one line says so and nothing is run or written).
# Environment: PYTHON (default python3, else python), GPU_CHECK_BUDGET (seconds, default 570),
# GPU_CHECK_STEP_LIMIT (seconds: every step's limit instead of its own, for a slow machine or a test).
set -u

# name|limit s|files|what (the order is the order to run them in: the issue's figures first)
STEP_TABLE="\
env|45|2|versions of Python, torch, CUDA, NumPy and the dependencies; a CUDA op; numba compiles one function
pytest_gpu|450|3|python -m pytest -m gpu on the test files holding GPU tests (JUnit: pytest_gpu.xml)
train|130|2|P2g: paper VPT, Adam, batch 16384, float32, epochs/s: the CUDA-graph step (auto) against eager (off) and the plain loop
parity|110|2|CPU/GPU parity: loss histories (float64, float32; eager and graph step) and rollouts (host and device engine)
ensemble|130|2|P2e: ensembles of 1 and 64 seeds, model-epochs/s (target: 64 seeds >= 5000), graph against eager
rollout|150|2|P4: 10^4..10^6 initial conditions on the device, state-steps/s (target 10^6 ICs >= 1e9): CUDA graph against eager, with metrics and volume
ddp|180|2|DDP: torchrun world size 1 over NCCL, and world size 2 over Gloo on the one GPU, each against one plain process
compile|300|2|the torch.compile step (Triton) against eager, paper VPT, batch 16384
lm|240|3|Levenberg-Marquardt on CUDA, configs/rigid_body_vpt_lm.toml, 150 s (target: training loss <= 5e-4; log: lm_cuda.csv)
rollout_io|480|2|the whole run_rollouts at 10^6 ICs writing HDF5, device engine against host engine and the I/O bound"

# name|steps|what: the steps in groups that each fit ONE device call of a lent machine's session (15 minutes of
# device time, the machine's start of 1-2 minutes included: one call of at most GPU_CHECK_BUDGET s per session)
GROUP_TABLE="\
figures|train,ensemble,rollout,parity|the issue's figures: P2g, P2e, P4 and CPU/GPU parity (8 files: the env step runs with tests)
tests|env,pytest_gpu|every GPU test
extras|ddp,lm|DDP at world sizes 1 and 2, Levenberg-Marquardt on CUDA
compile|compile|the torch.compile step
io|rollout_io|the whole run_rollouts at 10^6 ICs writing HDF5"

# plan|step|limit s|what: steps run into one log within one device call (issue 89: ten minutes, every figure
# printed as measured, no torch.compile); a plan's own steps (setup, f64_graph, rollout_model) are not --list's
PLAN_TABLE="\
ten-minutes|setup|45|offline set-up of what the image lacks, from .gpu_wheels (scripts/gpu_setup.sh; not in --smoke)
ten-minutes|f64_graph|100|float64: the CUDA-graph step equals the eager step after 80 steps; the members' chain inside the ensemble's CUDA graph (2 GPU tests)
ten-minutes|train|130|P2g: paper VPT, Adam, batch 16384, float32, epochs/s: the CUDA-graph step (auto) against eager (off), same run, and the plain loop
ten-minutes|ensemble|130|P2e: ensembles of 1 and 64 seeds, model-epochs/s, graph against eager
ten-minutes|rollout_model|90|P4: model steps of 10^4, 10^5, 10^6 initial conditions on the device, state-steps/s, CUDA graph against eager (part d i)"
PLAN_BUDGET=540  # seconds: 9 minutes of a 10-minute call

usage() { sed -n '2,31p' "$0" | sed 's/^# \{0,1\}//'; }
die() { echo "gpu_check: $*" >&2; exit 2; }

step_names() { while IFS='|' read -r name _; do echo "$name"; done <<< "$STEP_TABLE"; }
step_field() {  # step_field NAME N: field N (2 limit, 3 files, 4 what) of NAME's row
    local name limit files what
    while IFS='|' read -r name limit files what; do
        if [[ "$name" == "$1" ]]; then
            case $2 in 2) echo "$limit" ;; 3) echo "$files" ;; 4) echo "$what" ;; esac
            return 0
        fi
    done <<< "$STEP_TABLE"
    return 1
}

ONLY="" OUT_DIR="" DRY="" SMOKE="" ALL="" LIST="" INNER="" GROUP="" LIST_GROUPS="" PLAN="" LIST_PLANS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --list) LIST=1 ;;
        --groups) LIST_GROUPS=1 ;;
        --group) [[ $# -ge 2 && -n "$2" ]] || die "--group needs a group name (--groups shows them)"
                 GROUP=$2; shift ;;
        --group=*) GROUP=${1#--group=} ;;
        --all) ALL=1 ;;
        --plans) LIST_PLANS=1 ;;
        --plan) [[ $# -ge 2 && -n "$2" ]] || die "--plan needs a plan name (--plans shows them)"
                PLAN=$2; shift ;;
        --plan=*) PLAN=${1#--plan=} ;;
        --only) [[ $# -ge 2 && -n "$2" ]] || die "--only needs a step name (--list shows them)"
                ONLY=$2; shift ;;
        --only=*) ONLY=${1#--only=} ;;
        --out) [[ $# -ge 2 && -n "$2" ]] || die "--out needs a directory"
               OUT_DIR=$2; shift ;;
        --out=*) OUT_DIR=${1#--out=} ;;
        --smoke) SMOKE=1 ;;
        --dry-run) DRY=1 ;;
        --run-step) INNER=$2; shift ;;  # internal: one step's commands, run under its time limit
        -h|--help) usage; exit 0 ;;
        *) die "unknown argument $1 (use --list, --groups, --plans, --only STEP[,STEP...], --group NAME, --plan NAME, --all, --out DIR, --smoke, --dry-run or -h)" ;;
    esac
    shift
done

REPO=$(cd "$(dirname "$0")/.." && pwd) || exit 1
PY=${PYTHON:-python3}
[[ -n "${PYTHON:-}" ]] || command -v python3 >/dev/null || PY=python  # the device image's torch is python3's
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"  # this checkout's vpintegrator, whatever is installed
export PYTHONUNBUFFERED=1  # a step killed at its limit leaves in its log what it printed
DEV=cuda
[[ -n "$SMOKE" ]] && DEV=cpu

# run CMD...: print it (--dry-run: "STEP<TAB>command" and nothing else), else run it
run() {
    local cmd
    printf -v cmd '%q ' "$@"
    cmd=${cmd% }
    if [[ -n "$DRY" ]]; then
        printf '%s\t%s\n' "$STEP" "$cmd"
        return 0
    fi
    echo "gpu_check: $STEP: \$ $cmd"
    "$@"
}

# --- the steps: each runs its commands in a fresh scratch directory ($SCRATCH) and writes to $OUT -----------

step_env() {
    run "$PY" - "$DEV" "$("$PY" scripts/gpu_deps.py --required)" "$("$PY" scripts/gpu_deps.py --optional)" <<'EOF'
import importlib, importlib.metadata, sys, time
print(f"Python {sys.version.split()[0]} at {sys.executable}")
required, optional = sys.argv[2].split(), sys.argv[3].split()  # pyproject's, through scripts/gpu_deps.py
missing = []
for name in required + optional:
    try:
        importlib.import_module(name)
        print(f"{name} {importlib.metadata.version(name.replace('_', '-'))}")
    except Exception as err:  # noqa: BLE001 -- report every missing or broken dependency
        missing.append(name)
        print(f"{name}: {type(err).__name__}: {err}")
import torch
print(f"CUDA {torch.version.cuda}, available {torch.cuda.is_available()}, {torch.cuda.device_count()} device(s)"
      + (f": {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else ""))
x = torch.randn(1024, 1024, device=sys.argv[1], dtype=torch.float64)
print(f"a matmul on {sys.argv[1]}: {float((x @ x.T).trace()):.6g}")
if "numba" not in missing:
    import numba
    tic = time.perf_counter()
    numba.njit(lambda a: a + 1)(1)
    print(f"numba compiled one function in {time.perf_counter() - tic:.2f} s")
import vpintegrator
print(f"vpintegrator {vpintegrator.__version__} from {vpintegrator.__file__}")
print("missing: " + (" ".join(missing) or "none"))
sys.exit(1 if set(missing) & set(required) else 0)
EOF
}

gpu_test_files() {  # the test files that hold GPU tests (collecting only these: fewer imports, less to miss)
    (cd "$REPO" && grep -l '@pytest.mark.gpu' tests/test_*.py | grep -v test_gpu_check.py)
}

step_pytest_gpu() {
    local files
    mapfile -t files < <(gpu_test_files)
    run "$PY" -m pytest -m gpu -q -rA -p no:cacheprovider --junitxml="$OUT/pytest_gpu.xml" "${files[@]}"
}

step_train() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_train.py --device cpu --fast-steps auto,off --epochs 1 --rounds 1 --no-plain \
            --no-profile
    else
        run "$PY" scripts/bench_train.py --device cuda --fast-steps auto,off --epochs 5 --rounds 1 --no-profile
    fi
}

step_parity() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/gpu_parity.py --device cpu --n-traj 4 --epochs 1 --ics 4 --steps 6
    else
        run "$PY" scripts/gpu_parity.py --device cuda
    fi
}

step_ensemble() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_ensemble.py --device cpu --sizes 1 2 --epochs 1 --n-traj 8 --max-sequential 1
    else
        run "$PY" scripts/bench_ensemble.py --device cuda --sizes 1 64 --max-sequential 2
    fi
}

step_rollout() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_rollout.py --device cpu --skip a,a2,a3,b,c,d3 --max-ics 10000 --d-steps 6 \
            --d-metric-steps 3
    else
        run "$PY" scripts/bench_rollout.py --device cuda --skip a,a2,a3,b,c,d3 --max-ics 1000000
    fi
}

step_ddp() {
    local nccl=nccl
    [[ -n "$SMOKE" ]] && nccl=gloo
    run "$PY" -m torch.distributed.run --standalone --nproc_per_node=1 scripts/ddp_check.py --device "$DEV" \
        --backend "$nccl" --out "$SCRATCH/ddp1"
    run "$PY" -m torch.distributed.run --standalone --nproc_per_node=2 scripts/ddp_check.py --device "$DEV" \
        --backend gloo --out "$SCRATCH/ddp2"
}

step_compile() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_train.py --device cpu --fast-steps compile --epochs 1 --rounds 1 --no-plain \
            --no-profile
    else
        run "$PY" scripts/bench_train.py --device cuda --fast-steps compile --epochs 3 --rounds 1 --no-plain \
            --no-profile
    fi
}

step_lm() {
    local n_traj=() limit=150
    [[ -n "$SMOKE" ]] && n_traj=(--n-traj 16) && limit=5
    run "$PY" -m vpintegrator.cli.gen rigid_body_paper "${n_traj[@]}" --out "$SCRATCH/rb.h5" --quiet
    run "$PY" -m vpintegrator.cli.train configs/rigid_body_vpt_lm.toml --data "$SCRATCH/rb.h5" --device "$DEV" \
        --time-limit "$limit" --out "$SCRATCH/lm" --quiet
    run cp "$SCRATCH/lm/log.csv" "$OUT/lm_cuda.csv"
}

step_setup() {  # the plan's first step: on the lent machine only (--smoke: this machine has the package)
    if [[ -n "$SMOKE" ]]; then
        [[ -n "$DRY" ]] || echo "gpu_check: setup: skipped (--smoke: no wheels to install here)"
    else
        run bash scripts/gpu_setup.sh
    fi
}

step_f64_graph() {  # skipped without CUDA (-m gpu tests): --smoke checks that they are collected and run
    run "$PY" -m pytest -m gpu -q -rA -p no:cacheprovider --junitxml="$OUT/f64_graph.xml" \
        "tests/test_fast_step_scalars.py::test_cuda_float64_graph_step_equals_the_eager_step_after_80_steps" \
        "tests/test_fused_members.py::test_on_cuda_the_graph_captured_ensemble_trains_each_member_as_alone"
}

step_rollout_model() {  # P4's figure: model steps only (part d ii at 10^6 with the volume takes ~200 s alone)
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_rollout.py --device cpu --skip a,a2,a3,b,c,d2,d3 --max-ics 10000 --d-steps 6
    else
        run "$PY" scripts/bench_rollout.py --device cuda --skip a,a2,a3,b,c,d2,d3 --max-ics 1000000
    fi
}

step_rollout_io() {
    if [[ -n "$SMOKE" ]]; then
        run "$PY" scripts/bench_rollout.py --device cpu --skip a,a2,a3,b,c,d1,d2 --max-ics 10000 \
            --d-process-steps 3 --workdir "$SCRATCH"
    else
        run "$PY" scripts/bench_rollout.py --device cuda --skip a,a2,a3,b,c,d1,d2 --max-ics 1000000 \
            --workdir "$SCRATCH"
    fi
}

# --- one step, under its limit -------------------------------------------------------------------------------

if [[ -n "$INNER" ]]; then  # bash gpu_check.sh --run-step NAME --out DIR [--smoke]: the step's commands
    STEP=$INNER
    OUT=$(realpath -m "$OUT_DIR")
    cd "$REPO" || exit 1
    SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check_$STEP.XXXXXX") || exit 1
    trap 'rm -rf "$SCRATCH"' EXIT
    trap 'exit 143' TERM  # killed at the limit: the scratch directory goes all the same
    set -e
    "step_$STEP"
    exit 0
fi

if [[ -n "$LIST" ]]; then
    while IFS='|' read -r name limit files what; do
        printf '%s\t%s s\t%s files\t%s\n' "$name" "$limit" "$files" "$what"
    done <<< "$STEP_TABLE"
    exit 0
fi

if [[ -n "$LIST_GROUPS" ]]; then
    while IFS='|' read -r name steps what; do
        limits=0
        IFS=',' read -ra members <<< "$steps"
        for member in "${members[@]}"; do limits=$((limits + $(step_field "$member" 2))); done
        printf '%s\t%s\t%s s\t%s\n' "$name" "$steps" "$limits" "$what"
    done <<< "$GROUP_TABLE"
    exit 0
fi
if [[ -n "$LIST_PLANS" ]]; then
    while IFS='|' read -r plan name limit what; do
        printf '%s\t%s\t%s s\t%s\n' "$plan" "$name" "$limit" "$what"
    done <<< "$PLAN_TABLE"
    exit 0
fi
declare -A PLAN_LIMIT=() PLAN_WHAT=()
if [[ -n "$PLAN" ]]; then  # a plan's steps, checked against its budget, then run below into one log
    [[ -z "$ONLY$ALL$GROUP" ]] || die "give --plan NAME, --group NAME, --only STEP[,STEP...] or --all, one of them"
    CHOSEN=() plan_total=0
    while IFS='|' read -r plan name limit what; do
        [[ "$plan" == "$PLAN" ]] || continue
        CHOSEN+=("$name") PLAN_LIMIT[$name]=$limit PLAN_WHAT[$name]=$what
        plan_total=$((plan_total + limit))
    done <<< "$PLAN_TABLE"
    [[ ${#CHOSEN[@]} -gt 0 ]] || die "unknown plan '$PLAN'; the plans: $(cut -d'|' -f1 <<< "$PLAN_TABLE" | sort -u | tr '\n' ' ')"
    (( plan_total <= PLAN_BUDGET )) || die "plan $PLAN's limits add up to ${plan_total} s, more than ${PLAN_BUDGET} s"
    export TORCH_COMPILE_DISABLE=1  # no step of a plan builds a torch.compile step, whatever it asks
fi
if [[ -n "$GROUP" ]]; then
    [[ -z "$ONLY" && -z "$ALL" ]] || die "give --group NAME, --only STEP[,STEP...] or --all, one of them"
    ONLY=$(while IFS='|' read -r name steps _; do [[ "$name" == "$GROUP" ]] && echo "$steps"; done <<< "$GROUP_TABLE")
    [[ -n "$ONLY" ]] || die "unknown group '$GROUP'; the groups: $(cut -d'|' -f1 <<< "$GROUP_TABLE" | tr '\n' ' ')"
fi
[[ -n "$ONLY" && -n "$ALL" ]] && die "give --only STEP[,STEP...] or --all, not both"
if [[ -n "$PLAN" ]]; then
    :
elif [[ -n "$ALL" ]]; then
    mapfile -t CHOSEN < <(step_names)
elif [[ -n "$ONLY" ]]; then
    IFS=',' read -ra CHOSEN <<< "$ONLY"
    [[ ${#CHOSEN[@]} -gt 0 ]] || die "--only needs a step name (--list shows them)"
elif [[ -n "$DRY" ]]; then
    mapfile -t CHOSEN < <(step_names)
else
    die "name the steps to run: --only STEP[,STEP...] (--list shows them), or --all"
fi
declare -A SEEN=()
BUDGET=${GPU_CHECK_BUDGET:-570}
total_limit=0 total_files=0
for name in "${CHOSEN[@]}"; do
    [[ -z "$PLAN" ]] || break
    step_field "$name" 2 >/dev/null || die "unknown step '$name'; the steps: $(step_names | tr '\n' ' ')"
    [[ -z "${SEEN[$name]:-}" ]] || die "step '$name' named twice"
    SEEN[$name]=1
    total_limit=$((total_limit + $(step_field "$name" 2)))
    total_files=$((total_files + $(step_field "$name" 3)))
done
if [[ -z "$ALL$PLAN" && -z "$DRY" && -z "$SMOKE" ]]; then
    (( total_limit <= BUDGET )) || die "steps ${CHOSEN[*]} may take ${total_limit} s together, more than one device" \
        "call's ${BUDGET} s (GPU_CHECK_BUDGET): run them in separate calls"
    (( total_files <= 8 )) || die "steps ${CHOSEN[*]} write up to ${total_files} files, more than the 8 a device call" \
        "returns: run them in separate calls"
fi

if [[ -n "$DRY" ]]; then
    SCRATCH='$SCRATCH'
    OUT=$(realpath -m "${OUT_DIR:-${OUT:-$REPO/runs/gpu_check}}")
    cd "$REPO" || exit 1
    for STEP in "${CHOSEN[@]}"; do "step_$STEP"; done
    exit 0
fi

if [[ -z "$SMOKE" ]] && ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    die "no CUDA device here (torch.cuda.is_available() is False): nothing was run. Run it on a machine with a GPU" \
        "(--smoke runs the steps on the CPU at toy sizes; --dry-run prints them)."
fi
OUT=$(realpath -m "${OUT_DIR:-${OUT:-$REPO/runs/gpu_check}}")  # relative to where it was called from
mkdir -p "$OUT" || exit 1
MACHINE=$("$PY" -c 'import os, platform, torch
cuda = torch.cuda.is_available()
print(f"{platform.node()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, torch {torch.__version__}, "
      f"CUDA {torch.version.cuda}, " + (f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}" if cuda else "no CUDA device"))' 2>&1 | tail -1)

# the steps' commands and exit status: "name<TAB>rc<TAB>seconds<TAB>commands" (the commands from its log)
status_line() {  # status_line NAME RC SECONDS LOG
    local commands
    commands=$(grep -o "gpu_check: $1: \\\$ .*" "$4" | sed "s/^gpu_check: $1: \\\$ //" | paste -sd ';' | tr '\t' ' ')
    printf '%s\t%d\t%d\t%s\n' "$1" "$2" "$3" "$commands"
}

status=0
if [[ -n "$PLAN" ]]; then  # one log, printed as it goes; each step under its own limit
    LOG=$OUT/$PLAN.log
    rm -f "$LOG" "$OUT/$PLAN.tsv"
    {
        echo "gpu_check: machine: $MACHINE"
        echo "gpu_check: plan $PLAN$([[ -n "$SMOKE" ]] && echo ' (smoke: CPU, toy sizes)'): ${CHOSEN[*]}," \
             "limits ${plan_total} s in all, TORCH_COMPILE_DISABLE=${TORCH_COMPILE_DISABLE:-unset}; log $LOG"
    } | tee "$LOG"
    t_plan=$SECONDS ok=0
    for name in "${CHOSEN[@]}"; do
        limit=${GPU_CHECK_STEP_LIMIT:-${PLAN_LIMIT[$name]}}
        echo "=== [$((SECONDS - t_plan)) s] $name (limit $limit s): ${PLAN_WHAT[$name]}" | tee -a "$LOG"
        t0=$SECONDS
        args=(--run-step "$name" --out "$OUT")
        [[ -n "$SMOKE" ]] && args+=(--smoke)
        timeout --kill-after=10 "$limit" bash "$0" "${args[@]}" 2>&1 | tee -a "$LOG"
        rc=${PIPESTATUS[0]}
        status_line "$name" "$rc" $((SECONDS - t0)) "$LOG" >>"$OUT/$PLAN.tsv"
        echo "=== [$((SECONDS - t_plan)) s] $name: exit $rc after $((SECONDS - t0)) s$( ((rc == 124 || rc == 137)) &&
             echo " (killed at its limit of $limit s)")" | tee -a "$LOG"
        ((rc == 0)) && ok=$((ok + 1)) || status=1
    done
    echo "=== plan $PLAN done in $((SECONDS - t_plan)) s: $ok of ${#CHOSEN[@]} steps exited 0" | tee -a "$LOG"
    exit $status
fi
for name in "${CHOSEN[@]}"; do
    limit=${GPU_CHECK_STEP_LIMIT:-$(step_field "$name" 2)}
    rm -f "$OUT/$name.log" "$OUT/$name.tsv"
    echo "gpu_check: $name: started (limit $limit s), log in $OUT/$name.log" >&2
    t0=$SECONDS
    {
        echo "gpu_check: machine: $MACHINE"
        echo "gpu_check: step $name$([[ -n "$SMOKE" ]] && echo ' (smoke: CPU, toy sizes)'): $(step_field "$name" 4)"
    } >"$OUT/$name.log"
    args=(--run-step "$name" --out "$OUT")
    [[ -n "$SMOKE" ]] && args+=(--smoke)
    timeout --kill-after=10 "$limit" bash "$0" "${args[@]}" >>"$OUT/$name.log" 2>&1
    rc=$?
    seconds=$((SECONDS - t0))
    status_line "$name" "$rc" "$seconds" "$OUT/$name.log" >"$OUT/$name.tsv"
    echo "gpu_check: $name: exit $rc after $seconds s$( ((rc == 124 || rc == 137)) && echo " (killed at its limit of $limit s)")" |
        tee -a "$OUT/$name.log" >&2
    ((rc == 0)) || status=1
done
if [[ -n "$ALL" ]]; then
    "$PY" "$REPO/scripts/gpu_report.py" "$OUT" >/dev/null || status=1
fi
exit $status
