#!/usr/bin/env bash
# The main job, end to end, in a few minutes on a CPU:
#   vp-gen (the paper's rigid-body data) -> vp-train (the paper's VPT, briefly) -> vp-rollout (the VPT next to
#   four classical integrators, far past the training horizon) -> vp-plot (every figure kind).
#
#   scripts/demo.sh [RUN_DIR]        (default runs/demo; set DEMO_TRAIN_SECONDS to train longer)
#
# Everything goes into RUN_DIR: data.h5, vpt/ (the training run), rollout.h5 + rollout.csv/.md (metrics
# table), figures/ (PDF and PNG).
set -euo pipefail

run_dir="${1:-runs/demo}"
train_seconds="${DEMO_TRAIN_SECONDS:-100}"
cd "$(dirname "$0")/.."
if [[ -e "$run_dir/vpt" ]]; then
    echo "demo: $run_dir/vpt exists already; give a fresh directory (scripts/demo.sh RUN_DIR)" >&2
    exit 1
fi
mkdir -p "$run_dir"

echo "== 1/4 vp-gen: the paper's 1238 rigid-body trajectories, dt = 0.2, t in [0, 20], by implicit midpoint as in the paper"
vp-gen rigid_body_paper --method implicit_midpoint --out "$run_dir/data.h5" --quiet

echo "== 2/4 vp-train: the paper's VPT (162 parameters), Levenberg-Marquardt, for at most ${train_seconds} s on the CPU"
# configs/rigid_body_vpt_lm.toml is the paper's VPT trained with Levenberg-Marquardt on random subsamples of
# 1024 windows (float64): on this kind of 2-core CPU it reaches the paper's training loss (5e-4) in about a
# minute and a half of wall time, where the paper's Adam schedule took 6 GPU hours
# (configs/rigid_body_vpt.toml). Set DEMO_TRAIN_SECONDS=300 for a loss near 2e-4.
vp-train configs/rigid_body_vpt_lm.toml --data "$run_dir/data.h5" --out "$run_dir/vpt" \
    --time-limit "$train_seconds" --quiet

echo "== 3/4 vp-rollout: the paper's trajectories 1 and 4 to t = 100 (5x the training horizon)"
# rows 100 and 719 of the paper set are its "trajectory 1" and "trajectory 4" (v = 1.1); beyond t = 20 the
# reference is continued from the data's last state with the data's own generator (here implicit midpoint, the paper's reference)
vp-rollout --data "$run_dir/data.h5" --model "vpt=$run_dir/vpt" \
    --integrators implicit_midpoint,rk4,gauss_legendre4,splitting \
    --traj 100,719 --t-end 100 --device cpu --out "$run_dir/rollout.h5"

echo "== 4/4 vp-plot: every figure kind, PDF and PNG"
vp-plot "$run_dir/rollout.h5" --kind all --out "$run_dir/figures"

echo
echo "Metrics table: $run_dir/rollout.md"
echo "Figures:       $run_dir/figures/ (trajectories3d, invariants, error, volume, phase; .pdf and .png)"
