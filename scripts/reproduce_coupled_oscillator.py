#!/usr/bin/env python
"""The coupled-oscillator study (issue 6 item 6): VPT against the standard transformer, Störmer–Verlet and
RK4, energy drift over 10⁴ steps (dt = 0.4, t in [0, 4000]), with figures and a results table.

Runs the package's CLIs in order, everything under ``--out RUN``:

1. ``vp-gen``: ``RUN/data/train.h5`` (``coupled_oscillator_box``: initial conditions uniform in
   q in [-1, 1]², p in [-2, 2]², DOP853, t in [0, 100]); ``RUN/data/eval_default.h5`` (GeometricProblems'
   default initial condition q0 = (1, 0), p0 = (2, 0)) and ``RUN/data/eval_heldout.h5`` (``--heldout``
   further initial conditions from the same box, another seed), both by DOP853 to the full horizon.
2. ``vp-train`` per seed: ``configs/study/coupled_oscillator_vpt.toml`` and ``..._st.toml``
   (Levenberg–Marquardt, float64) into ``RUN/train/{vpt,st}_s<seed>`` (``--jobs`` at a time, one thread each).
3. ``vp-rollout``: every model (its first window from the reference) next to Störmer–Verlet and RK4 into
   ``RUN/rollout/{default,heldout}.h5`` (+ ``.csv``/``.md`` metrics per method and seed).
4. ``vp-plot``: energy, relative error and volume figures into ``RUN/figures/{default,heldout}/``.
5. ``RUN/results.md`` and ``RUN/results.json``: one row per method, models as mean ± std over seeds.

Usage::

    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator
    python scripts/reproduce_coupled_oscillator.py --out runs/co_quick --quick          # about 2 minutes
    python scripts/reproduce_coupled_oscillator.py --out runs/coupled_oscillator --table-only

Exit status: 0 done, 2 bad input or a failed step (one line on stderr), 130 interrupted.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("vpt", "st")
INTEGRATORS = ("stormer_verlet", "rk4")
DT = 0.4  # the specs' step (coupled_oscillator, coupled_oscillator_box)
EVAL_SETS = ("default", "heldout")
#: vp-train --set init_scale=...: the initial weights times this. From the default Glorot init the
#: paper-sized dim-4 VPT starts at a relative loss of 9-97 (seeds 0-7) and Levenberg-Marquardt stalls near
#: 1.2; from 0.3x it reaches about 1e-3 in a CPU minute.
INIT_SCALE = 0.3
_CLI = {"vp-gen": "gen", "vp-train": "train", "vp-rollout": "rollout", "vp-plot": "plot"}
_LABEL = re.compile(r"^(?P<model>[a-z0-9]+)_s(?P<seed>\d+)$")
_NAMES = {
    "vpt": "VPT (volume-preserving transformer)",
    "st": "standard transformer",
    "stormer_verlet": "Störmer–Verlet",
    "rk4": "RK4",
}


class StudyError(Exception):
    """A bad argument or a failed step: reported as one line, exit status 2."""


@dataclass
class Settings:
    """The study's settings (written to ``RUN/settings.json``)."""

    out: str
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])
    train_seconds: float = 120.0
    jobs: int = 2
    n_steps: int = 10_000
    heldout: int = 10
    train_n_traj: int = 1000
    quick: bool = False
    skip_existing: bool = False
    vpt_config: str = "configs/study/coupled_oscillator_vpt.toml"
    st_config: str = "configs/study/coupled_oscillator_st.toml"
    init_scale: float = INIT_SCALE

    @property
    def t_end(self) -> float:
        return round(self.n_steps * DT, 10)


# --------------------------------------------------------------------------- arguments


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # one line, no usage dump
        raise StudyError(f"{message} (see --help)")


def _int_list(text: str, name: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise StudyError(f"{name} must be a comma list of non-negative integers, e.g. 0,1,2; got {text!r}") from None
    if not values or any(v < 0 for v in values) or len(set(values)) != len(values):
        raise StudyError(f"{name} must be a non-empty comma list of distinct non-negative integers; got {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> tuple[Settings, bool]:
    """Parse and validate the command line; returns (settings, table_only)."""
    p = _Parser(
        prog="reproduce_coupled_oscillator.py",
        description="Coupled-oscillator study: VPT vs standard transformer vs Stormer-Verlet and RK4 over 10^4 steps.",
    )
    p.add_argument("--out", required=True, help="Run directory (created).")
    p.add_argument("--seeds", help="Comma list of training seeds (default 0,1,2; --quick: 0).")
    p.add_argument("--train-seconds", type=float, help="vp-train --time-limit per model (default 120; --quick: 30).")
    p.add_argument("--jobs", type=int, help="Trainings at a time, one thread each (default 2).")
    p.add_argument("--n-steps", type=int, help="Rollout steps of dt = 0.4 (default 10000; --quick: 2500).")
    p.add_argument("--heldout", type=int, help="Held-out initial conditions (default 10; --quick: 3; 0: none).")
    p.add_argument("--train-n-traj", type=int, help="Training initial conditions (default 1000; --quick: 300).")
    p.add_argument("--vpt-config", help="vp-train TOML of the VPT (default configs/study/coupled_oscillator_vpt.toml).")
    p.add_argument("--st-config", help="vp-train TOML of the ST (default configs/study/coupled_oscillator_st.toml).")
    p.add_argument(
        "--init-scale", type=float,
        help=f"Multiply the models' initial weights by this (default {INIT_SCALE}; 1: the package's Glorot init).",
    )
    p.add_argument("--quick", action="store_true", help="One seed, 30-s trainings, 2500 steps: about 2 minutes.")
    p.add_argument("--skip-existing", action="store_true", help="Keep outputs already in RUN (finished steps).")
    p.add_argument("--table-only", action="store_true", help="Only rebuild RUN/results.md and results.json.")
    a = p.parse_args(argv)

    quick = a.quick
    s = Settings(
        out=a.out,
        seeds=_int_list(a.seeds, "--seeds") if a.seeds is not None else ([0] if quick else [0, 1, 2]),
        train_seconds=a.train_seconds if a.train_seconds is not None else (30.0 if quick else 120.0),
        jobs=a.jobs if a.jobs is not None else 2,
        n_steps=a.n_steps if a.n_steps is not None else (2500 if quick else 10_000),
        heldout=a.heldout if a.heldout is not None else (3 if quick else 10),
        train_n_traj=a.train_n_traj if a.train_n_traj is not None else (300 if quick else 1000),
        quick=quick,
        skip_existing=a.skip_existing,
        vpt_config=a.vpt_config or Settings.vpt_config,
        st_config=a.st_config or Settings.st_config,
        init_scale=a.init_scale if a.init_scale is not None else INIT_SCALE,
    )
    if not (math.isfinite(s.train_seconds) and s.train_seconds > 0):
        raise StudyError(f"--train-seconds must be a positive number of seconds; got {s.train_seconds!r}")
    if not (math.isfinite(s.init_scale) and s.init_scale > 0):
        raise StudyError(f"--init-scale must be a positive number (1: the package's init); got {s.init_scale!r}")
    if s.jobs < 1:
        raise StudyError(f"--jobs must be >= 1 (trainings at a time); got {s.jobs}")
    if s.n_steps < 6:
        raise StudyError(f"--n-steps must be >= 6 (two model windows of 3 states); got {s.n_steps}")
    if s.heldout < 0:
        raise StudyError(f"--heldout must be >= 0 (0: only the default initial condition); got {s.heldout}")
    if s.train_n_traj < 2:
        raise StudyError(f"--train-n-traj must be >= 2 (training and validation trajectories); got {s.train_n_traj}")
    for name in ("vpt_config", "st_config"):
        path = _resolve(getattr(s, name))
        if not a.table_only and not path.is_file():
            raise StudyError(f"--{name.replace('_', '-')} {getattr(s, name)}: no such file; give a vp-train TOML")
    out = Path(s.out)
    if out.exists() and not out.is_dir():
        raise StudyError(f"--out {out}: exists and is not a directory; choose another --out")
    if a.table_only:
        if not out.is_dir():
            raise StudyError(f"--table-only: --out {out} is not a run directory; run the study first")
    elif out.is_dir() and any(out.iterdir()) and not s.skip_existing:
        raise StudyError(f"--out {out}: not empty; add --skip-existing to continue it, or choose a fresh --out")
    return s, a.table_only


def _resolve(path: str | Path) -> Path:
    p = Path(path)
    return p if p.is_absolute() or p.exists() else ROOT / p


# --------------------------------------------------------------------------- running the CLIs


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def _argv(cmd: list[str]) -> list[str]:
    """``["vp-gen", ...]`` -> the same CLI through this interpreter (no PATH needed)."""
    return [sys.executable, "-m", f"vpintegrator.cli.{_CLI[cmd[0]]}", *cmd[1:]]


def _shown(cmd: list[str]) -> str:
    return " ".join(shlex.quote(str(c)) for c in cmd)


class Runner:
    """Runs CLI commands, logs each to a file, remembers the command lines for results.md."""

    def __init__(self, run: Path) -> None:
        self.run = run
        self.commands: list[str] = []
        self.children: list[subprocess.Popen] = []

    def start(self, cmd: list[str], log: Path) -> subprocess.Popen:
        log.parent.mkdir(parents=True, exist_ok=True)
        shown = _shown(cmd)
        self.commands.append(shown)
        print(f"$ {shown}", flush=True)
        with open(log, "w") as fh:
            proc = subprocess.Popen(_argv(cmd), stdout=fh, stderr=subprocess.STDOUT, env=_env(), cwd=ROOT)
        proc.log = log  # type: ignore[attr-defined]
        proc.cmd = cmd  # type: ignore[attr-defined]
        self.children.append(proc)
        return proc

    def wait(self, proc: subprocess.Popen) -> None:
        rc = proc.wait()
        self.children.remove(proc)
        if rc != 0:
            last = _last_line(proc.log)
            raise StudyError(f"{proc.cmd[0]} failed (exit {rc}): {last} [log: {proc.log}]")

    def call(self, cmd: list[str], log: Path) -> None:
        self.wait(self.start(cmd, log))

    def stop_all(self) -> None:
        for proc in list(self.children):
            if proc.poll() is None:
                proc.terminate()
        for proc in list(self.children):
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()


def _last_line(path: Path) -> str:
    try:
        lines = [ln.strip() for ln in Path(path).read_text().splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(empty log)"


def _paths(run: Path) -> dict[str, Path]:
    return {
        "train": run / "data" / "train.h5",
        "default": run / "data" / "eval_default.h5",
        "heldout": run / "data" / "eval_heldout.h5",
        "logs": run / "logs",
    }


def generate_data(s: Settings, runner: Runner) -> None:
    """vp-gen: training set and the evaluation sets (DOP853 to the full horizon)."""
    run = Path(s.out)
    p = _paths(run)
    jobs = [
        ("train", ["vp-gen", "coupled_oscillator_box", "--n-traj", str(s.train_n_traj), "--seed", "0",
                   "--out", str(p["train"]), "--no-progress"]),
        ("default", ["vp-gen", "coupled_oscillator", "--t-end", f"{s.t_end:g}", "--out", str(p["default"]),
                     "--no-progress"]),
    ]
    if s.heldout:
        jobs.append(("heldout", ["vp-gen", "coupled_oscillator_box", "--n-traj", str(s.heldout), "--seed", "1",
                                 "--t-end", f"{s.t_end:g}", "--out", str(p["heldout"]), "--no-progress"]))
    procs = []
    for name, cmd in jobs:
        if s.skip_existing and p[name].exists():
            print(f"skip: {p[name]} exists")
            continue
        procs.append(runner.start(cmd, p["logs"] / f"gen_{name}.log"))
    for proc in procs:
        runner.wait(proc)


def _run_dir(run: Path, model: str, seed: int) -> Path:
    return run / "train" / f"{model}_s{seed}"


def _finished(run_dir: Path) -> bool:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("stopped") not in (None, "running")
    except (OSError, ValueError):
        return False


def train_models(s: Settings, runner: Runner) -> None:
    """vp-train every model and seed, ``s.jobs`` at a time (one thread each)."""
    run = Path(s.out)
    configs = {"vpt": s.vpt_config, "st": s.st_config}
    queue = []
    for seed in s.seeds:
        for model in MODELS:
            out = _run_dir(run, model, seed)
            if s.skip_existing and _finished(out):
                print(f"skip: {out} finished")
                continue
            if out.exists():  # an unfinished run from an interrupted study: start it again
                shutil.rmtree(out)
            queue.append(["vp-train", str(_resolve(configs[model])), "--data", str(_paths(run)["train"]),
                          "--out", str(out), "--seed", str(seed), "--time-limit", f"{s.train_seconds:g}",
                          "--set", f"init_scale={s.init_scale!r}", "--no-progress"])
    running: list[subprocess.Popen] = []
    while queue or running:
        while queue and len(running) < s.jobs:
            cmd = queue.pop(0)
            log = run / "logs" / f"train_{Path(cmd[cmd.index('--out') + 1]).name}.log"
            running.append(runner.start(cmd, log))
        time.sleep(0.5)
        for proc in [r for r in running if r.poll() is not None]:
            running.remove(proc)
            runner.wait(proc)


def roll_out(s: Settings, runner: Runner) -> None:
    """vp-rollout of every trained model next to Störmer–Verlet and RK4, per evaluation set."""
    run = Path(s.out)
    models = [f"{m}_s{seed}={_run_dir(run, m, seed)}" for seed in s.seeds for m in MODELS]
    for name in EVAL_SETS:
        data = _paths(run)[name]
        if name == "heldout" and not s.heldout:
            continue
        out = run / "rollout" / f"{name}.h5"
        if s.skip_existing and out.exists() and out.with_suffix(".csv").exists():
            print(f"skip: {out} exists")
            continue
        cmd = ["vp-rollout", "--data", str(data), "--integrators", ",".join(INTEGRATORS)]
        for m in models:
            cmd += ["--model", m]
        cmd += ["--t-end", f"{s.t_end:g}", "--init", "reference", "--device", "cpu", "--out", str(out), "--quiet"]
        runner.call(cmd, run / "logs" / f"rollout_{name}.log")


def plot(s: Settings, runner: Runner) -> None:
    """vp-plot: energy (invariants), relative error and volume figures per evaluation set."""
    run = Path(s.out)
    for name in EVAL_SETS:
        h5 = run / "rollout" / f"{name}.h5"
        if not h5.exists():
            continue
        cmd = ["vp-plot", str(h5), "--kind", "invariants", "--kind", "error", "--kind", "volume",
               "--out", str(run / "figures" / name)]
        if name == "heldout":
            cmd += ["--traj", "all"]
        runner.call(cmd, run / "logs" / f"plot_{name}.log")


# --------------------------------------------------------------------------- the table

#: (results key, metrics column in rollout CSV, header)
ROLLOUT_COLUMNS = (
    ("max_rel_energy_drift", "max_rel_drift_energy", "max rel. energy drift"),
    ("energy_drift_slope", "drift_slope_energy", "energy drift slope (1/t)"),
    ("final_rel_error", "final_rel_error", "rel. error at t_end"),
    ("valid_time", "valid_time", "valid prediction time"),
    ("max_abs_cum_log_det_J", "max_abs_cum_log_det_J", "max abs cum. log det J"),
)
TRAIN_COLUMNS = (
    ("train_loss", "train loss"),
    ("val_loss", "best validation score"),
    ("train_seconds", "training s"),
)


def _read_csv(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        rows = list(csv.DictReader(fh))
    out = []
    for r in rows:
        row = {}
        for k, v in r.items():
            if k == "method":
                row[k] = v
                continue
            try:
                row[k] = float(v)
            except (TypeError, ValueError):
                row[k] = math.nan
        out.append(row)
    return out


def training_info(run_dir: Path) -> dict:
    """Losses and time of one vp-train run: the train loss at the best (validation) epoch, whose weights
    (best.pt) are rolled out, the best validation score (summary.json best_loss: the validation loss or,
    with monitor = val_rollout, the validation rollout error), the wall time, epochs, parameters."""
    summary = json.loads((run_dir / "summary.json").read_text())
    best_epoch = int(summary.get("best_epoch") or 0)
    train_loss = summary.get("train_loss")
    log = run_dir / "log.csv"
    if log.exists() and best_epoch:
        with open(log, newline="") as fh:
            for r in csv.DictReader(fh):
                if int(r["epoch"]) == best_epoch:
                    train_loss = float(r["train_loss"])
    num = lambda v: math.nan if v is None else float(v)  # noqa: E731
    return {
        "train_loss": num(train_loss),
        "val_loss": num(summary.get("best_loss")),
        "train_seconds": num(summary.get("wall_time")),
        "epochs": int(summary.get("epochs") or 0),
        "best_epoch": best_epoch,
        "n_params": int(summary.get("n_params") or 0),
        "stopped": summary.get("stopped"),
    }


def _mean_std(values: list[float]) -> tuple[float, float]:
    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return math.nan, math.nan
    if any(math.isinf(v) for v in vals):  # a failed rollout (blow-up): the mean is inf
        return (math.inf if sum(vals) > 0 else -math.inf) if not any(math.isnan(v) for v in vals) else math.nan, math.nan
    mean = sum(vals) / n
    if n < 2:
        return mean, math.nan
    var = sum((v - mean) ** 2 for v in vals) / (n - 1)  # ddof = 1
    return mean, math.sqrt(var)


def blowup_times(h5: Path) -> dict[str, list[float]]:
    """Per method label of a vp-rollout file: the time of each trajectory's blow-up (NaN: never)."""
    if not h5.exists():
        return {}
    import h5py

    out = {}
    with h5py.File(h5, "r") as f:
        t = f["t"][:]
        for label, g in f["methods"].items():
            out[label] = [float(t[k]) if k >= 0 else math.nan for k in g["failed_step"][:]]
    return out


def build_rows(run: Path, eval_set: str) -> list[dict]:
    """One row per method of ``RUN/rollout/<eval_set>.csv``: integrators as they are, models aggregated
    over seeds (``<key>`` mean and ``<key>_std``, ddof = 1) with their training numbers; ``blowup_t``:
    the earliest blow-up time of each (seed's) rollout over its trajectories (NaN: none blew up)."""
    path = run / "rollout" / f"{eval_set}.csv"
    if not path.exists():
        return []
    blowups = blowup_times(path.with_suffix(".h5"))
    groups: dict[str, list[tuple[int | None, dict]]] = {}
    order: list[str] = []
    for r in _read_csv(path):
        m = _LABEL.match(r["method"])
        method, seed = (m["model"], int(m["seed"])) if m else (r["method"], None)
        if method not in groups:
            groups[method] = []
            order.append(method)
        groups[method].append((seed, r))
    rows = []
    for method in order:
        members = groups[method]
        is_model = members[0][0] is not None
        row: dict = {"method": method, "kind": "model" if is_model else "integrator",
                     "seeds": [s for s, _ in members] if is_model else [], "n_traj": int(members[0][1].get("n_traj", 0)),
                     "failed": int(sum(r.get("failed", 0) or 0 for _, r in members)),
                     "blowup_t": [min(blowups.get(r["method"], [math.nan]), default=math.nan) for _, r in members]}
        for key, col, _ in ROLLOUT_COLUMNS:
            mean, std = _mean_std([r.get(col, math.nan) for _, r in members])
            row[key], row[f"{key}_std"] = mean, std
        if is_model:
            infos = []
            for seed, _ in members:
                rd = run / "train" / f"{method}_s{seed}"
                infos.append(training_info(rd) if (rd / "summary.json").exists() else {})
            for key, _ in TRAIN_COLUMNS:
                mean, std = _mean_std([i.get(key, math.nan) for i in infos])
                row[key], row[f"{key}_std"] = mean, std
            row["n_params"] = max((i.get("n_params", 0) for i in infos), default=0)
            row["per_seed"] = [
                {"seed": seed, **{key: r.get(col, math.nan) for key, col, _ in ROLLOUT_COLUMNS}, **info}
                for (seed, r), info in zip(members, infos)
            ]
        rows.append(row)
    return rows


def _fmt(v: float, blowup: bool = False) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "–"
    if math.isinf(v):
        return ("inf (blew up)" if blowup else "inf") if v > 0 else "-inf"
    a = abs(v)
    return f"{v:.3g}" if 1e-2 <= a < 1e4 or v == 0 else f"{v:.2e}"


def _cell(row: dict, key: str) -> str:
    mean, std = row.get(key, math.nan), row.get(f"{key}_std", math.nan)
    text = _fmt(mean, blowup=key in ("max_rel_energy_drift", "final_rel_error"))
    if std is not None and isinstance(std, float) and math.isfinite(std):
        text += f" ± {_fmt(std)}"
    return text


def format_table(rows: list[dict]) -> str:
    """A Markdown table: one row per method; models mean ± std over seeds (ddof = 1)."""
    head = ["method", "seeds"] + [h for _, _, h in ROLLOUT_COLUMNS] + [h for _, h in TRAIN_COLUMNS] + ["params"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for r in rows:
        cells = [_NAMES.get(r["method"], r["method"]), str(len(r["seeds"])) if r["seeds"] else "–"]
        cells += [_cell(r, k) for k, _, _ in ROLLOUT_COLUMNS]
        if r["kind"] == "model":
            cells += [_cell(r, k) for k, _ in TRAIN_COLUMNS] + [str(r.get("n_params", ""))]
        else:
            cells += ["–"] * (len(TRAIN_COLUMNS) + 1)
        if r.get("failed"):
            times = ", ".join(_fmt(t) for t in r.get("blowup_t", []) if not math.isnan(t))
            cells[0] += f" ({r['failed']} of {r['n_traj'] * max(1, len(r['seeds']))} rollouts blew up" + (
                f"; first at t = {times})" if times else ")")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_results(run: Path, commands: list[str] | None = None) -> str:
    """Build RUN/results.json and RUN/results.md from the rollout tables and training runs; return the
    Markdown."""
    settings_path = run / "settings.json"
    settings = json.loads(settings_path.read_text()) if settings_path.exists() else {}
    if commands is None:
        commands = settings.get("commands", [])
    tables = {name: build_rows(run, name) for name in EVAL_SETS}
    if not any(tables.values()):
        raise StudyError(f"{run}: no rollout tables (rollout/default.csv); run the study first (without --table-only)")
    n_steps = settings.get("n_steps")
    t_end = settings.get("t_end")
    titles = {
        "default": "GeometricProblems' default initial condition q0 = (1, 0), p0 = (2, 0)",
        "heldout": f"{settings.get('heldout', '?')} held-out initial conditions (box, seed 1; drift: worst, "
                   "error and valid time: mean over them)",
    }
    md = [
        "# Coupled oscillator: VPT vs standard transformer vs Störmer–Verlet and RK4",
        "",
        f"{n_steps} steps of dt = {DT} (t in [0, {t_end}]); reference: DOP853 (rtol = atol = 1e-12). Models: "
        f"seeds {settings.get('seeds')}, vp-train --time-limit {settings.get('train_seconds')} s each "
        f"({settings.get('jobs')} at a time, one thread), Levenberg–Marquardt, float64, best.pt = the epoch with the best validation score (configs/study: monitor = val_rollout, the mean relative error of a free rollout of the validation trajectories to t = 200); "
        "first window (3 states) from the reference; non-overlapping windows. Models: mean ± std over seeds "
        "(ddof = 1). Energy drift: max_t |H(t) − H(0)| / |H(0)|; slope: linear fit of the relative drift against t. "
        "Valid prediction time: first t with relative error > 0.1. log det J: per step (integrators) or per "
        "window map (models), cumulated (inf: a singular map, log|det J| = −inf somewhere). A blown-up rollout "
        "(|z| > 1000 |z0| or not finite) makes its drift and error inf; its slope is then meaningless.",
        "",
    ]
    for name in EVAL_SETS:
        if tables[name]:
            md += [f"## {titles[name]}", "", format_table(tables[name]).rstrip("\n"), "",
                   f"Figures: `figures/{name}/` (invariants = energy, error, volume).", ""]
    md += ["## Commands", "", "```sh", *commands, "```", ""]
    text = "\n".join(md)
    (run / "results.md").write_text(text)
    (run / "results.json").write_text(json.dumps(_plain({"settings": settings, "tables": tables}), indent=2) + "\n")
    return text


def _plain(obj):
    """Strict JSON: NaN (not defined, e.g. the std of one seed) -> null, ±inf (a blow-up) -> "inf"/"-inf"."""
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):
        return None if math.isnan(obj) else ("inf" if obj > 0 else "-inf")
    return obj


# --------------------------------------------------------------------------- main


def run_study(s: Settings) -> str:
    """All steps; returns the results Markdown."""
    run = Path(s.out)
    run.mkdir(parents=True, exist_ok=True)
    runner = Runner(run)
    t0 = time.perf_counter()
    try:
        generate_data(s, runner)
        train_models(s, runner)
        roll_out(s, runner)
        plot(s, runner)
    finally:
        runner.stop_all()
    invocation = "python scripts/reproduce_coupled_oscillator.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    previous = {}
    if (run / "settings.json").exists():
        previous = json.loads((run / "settings.json").read_text())
    record = {**asdict(s), "t_end": s.t_end, "wall_seconds": round(time.perf_counter() - t0, 1),
              "invocation": invocation,
              "commands": previous.get("commands", []) + runner.commands if s.skip_existing else runner.commands}
    (run / "settings.json").write_text(json.dumps(record, indent=2) + "\n")
    return write_results(run)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    try:
        s, table_only = parse_args(argv)
        text = write_results(Path(s.out)) if table_only else run_study(s)
    except StudyError as err:
        print(f"Error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("Interrupted.", file=sys.stderr)
        return 130
    print(text)
    print(f"Results: {Path(s.out) / 'results.md'} and results.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
