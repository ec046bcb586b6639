"""The paper's rigid-body study (Brantner, de Romemont, Kraus, Li 2025, arXiv 2312.11166), end to end over the CLIs.

Runs vp-gen, vp-train, vp-rollout and vp-plot as subprocesses (exactly what users run) and writes one
run directory::

    RUN/
      data/im.h5, exact.h5               the paper's 1238 ICs, h = 0.2, t in [0, 20]: implicit midpoint / DOP853
                                         (exact.h5 only with the model vpt_exact)
      data/heldout.toml                  spec of the held-out ICs (uniform on the unit sphere, own seed)
      data/heldout_im.h5, heldout_exact.h5   held-out ICs to t = 100: implicit midpoint / DOP853 (vpt_exact)
      train/<model>_s<seed>/             vp-train run directories (vpt_exact: VPT on exact.h5)
      rollout/paper_s<seed>.h5           trajectories 1 and 4 (rows 100, 719) to t = 100, IM-trained models
                                         + integrators, first window by implicit midpoint (the paper's setup)
      rollout/paper_exact_s<seed>.h5     the same on exact.h5 with vpt_exact, first window by the exact flow
      rollout/heldout_s<seed>.h5         every held-out IC to t = 100 (heldout_exact_s<seed>.h5: vpt_exact)
      rollout/long_s<seed>.h5            trajectories 1 and 4 to --long-t-end
      timing/                            CPU time to --timing-t-end, one trajectory, batch 1 (reference data:
                                         trajectory 1 by RK4): one vp-rollout process per method (whole-process
                                         CPU) and every method on the cost meter in one process (cost.json);
                                         timing.json, timing.md
      figures/                           vp-plot output
      results.json, results.md           the results table beside the paper's numbers, and the targets
      study.log                          every command, with its wall and CPU seconds
      logs/<task>.log                    each command's own output

Usage::

    OMP_NUM_THREADS=1 scripts/reproduce_rigid_body.py --out runs/reproduce_rigid_body           # the study
    OMP_NUM_THREADS=1 scripts/reproduce_rigid_body.py --quick --out runs/quick                  # a few minutes
    scripts/reproduce_rigid_body.py --out RUN --skip-existing     # resume a killed study
    scripts/reproduce_rigid_body.py --out RUN --table-only        # rebuild results.md/json only

The results table and the timing summary are in ``vpintegrator.studies.rigid_body_results``; the
task runner in ``vpintegrator.studies.runner``.
"""

from __future__ import annotations

from typing import Any

from dataclasses import dataclass
import shutil
import time
from pathlib import Path

from .rigid_body_results import (  # noqa: F401  (re-exported: the study's public names)
    ALL_MODELS, BAND_TARGET, COLUMNS, ERROR_TARGET, HELDOUT_SEED, IM_MODELS, INTEGRATORS, LOSS_TARGET, PAPER,
    PAPER_T, PAPER_TRAJ, QUICK_MODELS, build_results, format_results, read_results, write_heldout_spec, write_results,
    write_timing, write_timing_spec, z_band)
from .rigid_body_results import cost
from . import _rollouts, attention, export
from .._shipped import shipped_file
from ..config import key
from .options import BUDGETS, PLATEAU_HELP, Study, StudyOptions, StudyPlan, comma_list, model_list
from .runner import PLATEAU_WALL_FACTOR, Runner, StudyError, Task, budget_flags, check_study_out, study_lock
from .stats import read_json, redraw_from

PRETRAINED = ("vpt", "vpff", "st")
ATTENTION_MODELS = ("vpt", "vpt_arb", "st", "vpt_exact")  # the window models (the VPFF has no attention)


# --------------------------------------------------------------------------- arguments


#: the step cap of --budget plateau (Levenberg–Marquardt iterations; 10 per epoch): about what the CPU budgets
#: of 300 and 60 s bought on this 2-core machine (a VPT: ~1.3 CPU s per epoch, measured 2026-11-26)
MAX_STEPS = 2500
MAX_STEPS_QUICK = 500


@dataclass
class RigidBodyOptions(StudyOptions):
    """The rigid-body study's own keys, beside the shared ones of ``StudyOptions``.

    Parameters
    ----------
    models : str
        Comma list out of vpff, vpt, vpt_arb, st, vpt_exact (default all; --quick vpff,vpt,st).
    train_seconds : float
        Seconds per training run (300; --quick 60): CPU seconds with --budget cpu, wall with --budget wall;
        with --budget plateau the wall ceiling is 10 times --wall-ceiling times it.
    long_t_end : float
        Horizon of the long rollout (5000; --quick 1000).
    long_volume : bool
        log|det J| in the long rollout (default on).
    timing_t_end : float
        Horizon of the CPU timing (50000; --quick 5000).
    n_heldout : int
        Held-out random ICs (100; --quick 20).
    timing_concurrent : bool
        Run timing processes beside others (default: alone; --quick: concurrent).
    config_dir : str
        Directory of rigid_body_<model>.toml (default: the shipped study configs, vp-train --list's
        study/rigid_body_<model>).
    quick : bool
        Scaled down (seeds 0,1; models vpff,vpt,st; 60 s per training; t = 1000 long run; t = 5000 timing; 20
        held-out ICs).
    """

    #: the shared key, with this study's default: each training stops at its validation plateau or step cap
    budget: str = key("plateau", choices=BUDGETS, help=PLATEAU_HELP)
    models: str | None = key(None, optional=True, check=lambda v: comma_list(v, "models"))
    train_seconds: float | None = key(None, optional=True, type=float, low=1.0, expected="a number >= 1")
    long_t_end: float | None = key(None, optional=True, type=float, low=1.0, expected="a number >= 1")
    long_volume: bool = key(True, type=bool)
    timing_t_end: float | None = key(None, optional=True, type=float, low=10.0, expected="a number >= 10")
    n_heldout: int | None = key(None, optional=True, type=int, low=1, expected=">= 1")
    timing_concurrent: bool | None = key(None, optional=True, type=bool)
    config_dir: str = key(default_factory=lambda: str(shipped_file("configs/study")), type=str)
    quick: bool = key(False, type=bool)


@dataclass(frozen=True, kw_only=True)
class RigidBodyPlan(StudyPlan):
    """The study's keys resolved once (``build_plan``: the --quick defaults filled in)."""

    seeds: list[int]
    max_steps: int
    models: list[str]
    train_seconds: float
    long_t_end: float
    long_volume: bool
    timing_t_end: float
    n_heldout: int
    timing_concurrent: bool
    config_dir: str
    quick: bool

    @property
    def run(self) -> Path:
        """The run directory (``--out``)."""
        return Path(self.out)


def build_plan(options: RigidBodyOptions, argv: tuple[str, ...] = ()) -> RigidBodyPlan:
    """The study's plan: the checked keys with the --quick defaults filled in."""
    o, q = options, options.quick
    return RigidBodyPlan(
        **{**StudyPlan.shared(o, argv, seeds=[0, 1] if q else [0, 1, 2, 3, 4]),
           # --budget plateau: the step cap (LM iterations: about what the CPU budgets bought, 60 and 300 s)
           "max_steps": o.max_steps if o.max_steps is not None else (MAX_STEPS_QUICK if q else MAX_STEPS)},
        models=model_list(o.models if o.models is not None else ",".join(QUICK_MODELS if q else ALL_MODELS),
                          "--models", ALL_MODELS, in_valid_order=True),  # canonical order, no duplicates
        train_seconds=o.train_seconds if o.train_seconds is not None else (60.0 if q else 300.0),
        long_t_end=o.long_t_end if o.long_t_end is not None else (1000.0 if q else 5000.0),
        long_volume=o.long_volume,
        timing_t_end=o.timing_t_end if o.timing_t_end is not None else (5000.0 if q else 50000.0),
        n_heldout=o.n_heldout if o.n_heldout is not None else (20 if q else 100),
        timing_concurrent=q if o.timing_concurrent is None else o.timing_concurrent,
        config_dir=o.config_dir, quick=q)


# --------------------------------------------------------------------------- the plan


def _rule(a: RigidBodyPlan) -> str:
    """What stops each training, in a few words."""
    if a.budget == "plateau":
        return (f"plateau (patience {a.patience} epochs, 1 percent) or {a.max_steps} steps, wall ceiling "
                f"{PLATEAU_WALL_FACTOR * a.wall_ceiling * a.train_seconds:g} s,")
    return f"{a.train_seconds:g} {a.budget} s"


def _config(a: RigidBodyPlan, model: str) -> Path:
    return Path(a.config_dir) / f"rigid_body_{'vpt' if model == 'vpt_exact' else model}.toml"


def _train_task(a: RigidBodyPlan, runner: Runner, model: str, seed: int) -> Task:
    out = runner.run / "train" / f"{model}_s{seed}"
    name = f"train_{model}_s{seed}"
    data = runner.run / "data" / ("exact.h5" if model == "vpt_exact" else "im.h5")
    cmd = ["vp-train", _config(a, model), "--data", data, "--out", out, "--seed", str(seed),
           *budget_flags(a.training_budget, a.train_seconds), "--quiet"]
    if a.skip_existing and out.exists() and not runner.stamp(name).exists():
        summary = read_json(out / "summary.json")
        if (out / "last.pt").exists() and summary is not None:
            wall = float(summary.get("wall_time", 0.0))
            used = wall if a.budget == "wall" else float(summary.get("cpu_time", wall))
            # an unfinished run (killed or interrupted): continue it for the time it has left
            left = round(max(a.train_seconds - used, 1.0), 1)
            cmd = ["vp-train", "--resume", out, *budget_flags(a.training_budget, left, max(a.train_seconds - wall / a.wall_ceiling, 1.0)),
                   "--quiet"]
        else:
            shutil.rmtree(out)  # started but never checkpointed: start again
    return Task(name, cmd, [out / "summary.json", out / "log.csv"], ["gen_exact" if model == "vpt_exact" else "gen_im"])


def plan(a: RigidBodyPlan) -> Runner:
    """Every step of the study as a ``vpintegrator.studies.runner.Task`` of one ``vpintegrator.studies.runner.Runner``, in order."""
    runner = Runner(a.run, jobs=a.jobs, skip_existing=a.skip_existing, overwrite=a.overwrite)
    add, p = runner.add, runner.run.joinpath
    im_models = [m for m in a.models if m in IM_MODELS]
    exact = "vpt_exact" in a.models
    d = p("data")
    nop = "--quiet"

    # data
    add(Task("gen_im", ["vp-gen", "rigid_body_paper", "--method", "implicit_midpoint", "--out", d / "im.h5", nop],
             [d / "im.h5"]))
    if exact:
        add(Task("gen_exact", ["vp-gen", "rigid_body_paper", "--method", "dop853", "--out", d / "exact.h5", nop],
                 [d / "exact.h5"]))
    spec = d / "heldout.toml"
    add(Task("gen_heldout_im", ["vp-gen", spec, "--method", "implicit_midpoint", "--out", d / "heldout_im.h5", nop],
             [d / "heldout_im.h5"]))
    # the exact flow from the held-out ICs: vpt_exact's rollouts and every window model's attention step
    add(Task("gen_heldout_exact", ["vp-gen", spec, "--method", "dop853", "--out", d / "heldout_exact.h5", nop],
             [d / "heldout_exact.h5"]))

    # training: seed-major, so that seed 0's rollouts can start while later seeds train
    for s in a.seeds:
        for m in a.models:
            add(_train_task(a, runner, m, s))

    roll = "vp-rollout"
    integ = ",".join(INTEGRATORS)
    common = ["--device", "cpu", "--quiet"]
    traj = ",".join(str(i) for i in PAPER_TRAJ.values())
    rd = p("rollout")
    for s in a.seeds:
        mods = [x for m in im_models for x in ("--model", f"{m}={p('train', f'{m}_s{s}')}")]
        deps = [f"train_{m}_s{s}" for m in im_models]
        paper = [roll, "--data", d / "im.h5", *mods, "--integrators", integ, "--traj", traj,
                 "--init", "implicit_midpoint", *common]
        add(Task(f"rollout_paper_s{s}", [*paper, "--t-end", f"{PAPER_T:g}", "--out", rd / f"paper_s{s}.h5"],
                 _rollouts.outputs(rd / f"paper_s{s}.h5"), ["gen_im", *deps]))
        add(Task(f"rollout_heldout_s{s}",
                 [roll, "--data", d / "heldout_im.h5", *mods, "--integrators", integ, "--init",
                  "implicit_midpoint", "--t-end", f"{PAPER_T:g}", *common, "--out", rd / f"heldout_s{s}.h5"],
                 _rollouts.outputs(rd / f"heldout_s{s}.h5"), ["gen_heldout_im", *deps]))
        long_cmd = [*paper, "--t-end", f"{a.long_t_end:g}", "--out", rd / f"long_s{s}.h5"]
        if not a.long_volume:
            long_cmd.append("--no-volume")
        add(Task(f"rollout_long_s{s}", long_cmd, _rollouts.outputs(rd / f"long_s{s}.h5"), ["gen_im", *deps]))
        if exact:
            ex = ["--model", f"vpt_exact={p('train', f'vpt_exact_s{s}')}", "--integrators", integ,
                  "--init", "exact_flow", "--t-end", f"{PAPER_T:g}", *common]
            add(Task(f"rollout_paper_exact_s{s}",
                     [roll, "--data", d / "exact.h5", *ex, "--traj", traj, "--out", rd / f"paper_exact_s{s}.h5"],
                     _rollouts.outputs(rd / f"paper_exact_s{s}.h5"), ["gen_exact", f"train_vpt_exact_s{s}"]))
            add(Task(f"rollout_heldout_exact_s{s}",
                     [roll, "--data", d / "heldout_exact.h5", *ex, "--out", rd / f"heldout_exact_s{s}.h5"],
                     _rollouts.outputs(rd / f"heldout_exact_s{s}.h5"), ["gen_heldout_exact", f"train_vpt_exact_s{s}"]))

    # the attention of every window model: coupling, and the held-out error without it (studies/attention.py)
    for task in attention.tasks(runner.run, [m for m in a.models if m in ATTENTION_MODELS], a.seeds,
                                d / "heldout_exact.h5", "gen_heldout_exact", min(20, a.n_heldout), PAPER_T):
        add(task)

    # figures of the first seed
    s0 = a.seeds[0]
    fd = p("figures")
    tr1, tr4 = str(PAPER_TRAJ["traj1"]), str(PAPER_TRAJ["traj4"])  # vp-plot --traj: data-file rows, as vp-rollout
    figs = [
        (f"paper_s{s0}_traj1", rd / f"paper_s{s0}.h5", ["--kind", "all", "--traj", tr1]),
        (f"paper_s{s0}_traj4", rd / f"paper_s{s0}.h5", ["--kind", "all", "--traj", tr4]),
        (f"long_s{s0}_traj1", rd / f"long_s{s0}.h5",
         ["--kind", "invariants", "--kind", "error", "--kind", "volume", "--traj", tr1]),
        (f"heldout_s{s0}", rd / f"heldout_s{s0}.h5", ["--kind", "error", "--kind", "invariants", "--traj", "all"]),
    ]
    if exact:
        figs.append((f"paper_exact_s{s0}_traj1", rd / f"paper_exact_s{s0}.h5", ["--kind", "all", "--traj", tr1]))
    for name, src, opts in figs:
        add(Task(f"plot_{name}", ["vp-plot", src, *opts, "--out", fd / name], [fd / name], [f"rollout_{src.stem}"]))

    # CPU timing: one trajectory (row 100), batch 1, seed s0's models and the integrators: one vp-rollout process
    # per method (its whole-process CPU, start-up included), and every row priced in one process on the cost meter
    td = p("timing")
    ref = td / "ref.h5"
    add(Task("gen_timing_ref", ["vp-gen", td / "ref.toml", "--out", ref, nop], [ref]))
    methods = [(m, ["--model", f"{m}={p('train', f'{m}_s{s0}')}"], [f"train_{m}_s{s0}"]) for m in a.models]
    methods += [(i, ["--integrators", i], []) for i in INTEGRATORS]
    for label, spec_args, deps in methods:
        out = td / f"{label}.h5"
        add(Task(
            f"timing_{label}",
            [roll, "--data", ref, *spec_args, "--init", "implicit_midpoint", "--t-end", f"{a.timing_t_end:g}",
             "--no-volume", *common, "--out", out],
            [out.with_suffix(".csv")], ["gen_timing_ref", *deps], exclusive=not a.timing_concurrent,
            after=lambda out=out: out.unlink(missing_ok=True),  # the states are not needed: keep the csv
        ))
    add(cost.task(runner.run, list(a.models), s0, a.timing_t_end, exclusive=not a.timing_concurrent))
    return runner


def write_specs(a: RigidBodyPlan) -> None:
    """The held-out and timing-reference specs (small TOML files in RUN, so the data can be remade); needs
    ``RUN/data/im.h5`` (the timing reference starts at its trajectory 1)."""
    write_heldout_spec(a.run / "data" / "heldout.toml", a.n_heldout, HELDOUT_SEED, "implicit_midpoint",
                       "the rigid-body study (vp-study rigid_body)")
    write_timing_spec(a.run, a.timing_t_end)


# --------------------------------------------------------------------------- pretrained models


def export_pretrained(run: Path, out_dir: str | Path) -> dict[str, Any]:
    """Copy, for each of vpt, vpff and st, the best.pt of the seed with the lowest validation score
    (summary.json's best_loss, whatever its monitor) to ``out_dir/rigid_body_<model>.pt``; merge
    ``out_dir/provenance.json`` (seed, scores of every seed, monitor, training summary); return the entries
    by model."""
    chosen = export.export_pretrained(run, {f"rigid_body_{m}": m for m in PRETRAINED}, out_dir,
                                      study=f"vp-study rigid_body --out {run}")
    return {m: chosen[f"rigid_body_{m}"] for m in PRETRAINED}


# --------------------------------------------------------------------------- main


def _table_only(a: RigidBodyPlan) -> int:
    run = a.run
    if a.results is not None:  # the tables of a results file (a shipped one by name), no run directory
        if a.export_pretrained:
            raise StudyError("--export-pretrained copies the best checkpoints of a RUN; a results file has none: "
                             "leave out --results")
        _, _, text = redraw_from(run, a.results, read_results, format_results)
        print(text)
        print(f"results: {run / 'results.md'} (drawn from {a.results})")
        return 0
    if not (run / "rollout").is_dir() and not (run / "train").is_dir():
        raise StudyError(f"--table-only: {run} holds no study (no train/ or rollout/); give the RUN of an earlier study")
    if (run / "timing").is_dir():
        earlier = read_json(run / "timing" / "timing.json") or {}
        write_timing(run, earlier.get("t_end", a.timing_t_end))
    _, text = write_results(run)
    print(text)
    print(f"results: {run / 'results.md'} and {run / 'results.json'}")
    if a.export_pretrained:
        export_pretrained(run, a.export_pretrained)
    return 0


def run_study(a: RigidBodyPlan) -> int:
    """The study from its resolved keys (raises ``vpintegrator.studies.runner.StudyError``; the runner turns
    it into one line)."""
    run = a.run
    if a.table_only:
        return _table_only(a)
    if run.exists() and not run.is_dir():
        raise StudyError(f"--out {run} is a file; give a directory")
    check_study_out(run, a.skip_existing, a.overwrite)
    missing = [str(_config(a, m)) for m in a.models if not _config(a, m).is_file()]
    if missing:
        raise StudyError(f"training config {missing[0]} not found; give --config-dir DIR holding rigid_body_<model>.toml")
    with study_lock(run):
        return _run(a, run)


def _run(a: RigidBodyPlan, run: Path) -> int:
    """``run_study`` once RUN is checked and locked."""
    t_start = time.perf_counter()
    run.mkdir(parents=True, exist_ok=True)
    print(f"study: {run} (seeds {','.join(map(str, a.seeds))}; models {','.join(a.models)}; {_rule(a)} per training; {a.jobs} jobs; long t = {a.long_t_end:g}; timing t = {a.timing_t_end:g})", flush=True)
    runner = plan(a)
    # im.h5 first: the timing spec needs trajectory 1's initial condition from it (the counter counts all)
    if not runner.execute(["gen_im"]):
        raise StudyError(f"vp-gen of the paper data failed; see {runner.log_path('gen_im')}")
    write_specs(a)
    total_ok = runner.execute()
    timing = write_timing(run, a.timing_t_end)
    print(f"timing: {run / 'timing' / 'timing.json'} ({len(timing['methods'])} methods)", flush=True)
    _, text = write_results(run)
    print(text)
    print(f"results: {run / 'results.md'} and {run / 'results.json'}; figures: {run / 'figures'}; "
          f"log: {run / 'study.log'}")
    print(f"study finished in {time.perf_counter() - t_start:.0f} s wall", flush=True)
    if a.export_pretrained and total_ok:
        export_pretrained(run, a.export_pretrained)
    if not total_ok:
        raise runner.failure()
    return 0


#: the study as the runner runs it (``vp-study rigid_body``, ``scripts/reproduce_rigid_body.py``)
STUDY = Study(RigidBodyOptions, run_study, build_plan, doc=__doc__, prog="reproduce_rigid_body",
              defaults={"out": "runs/reproduce_rigid_body"},
              helps={"seeds": "Comma list of training seeds (default 0,1,2,3,4; --quick 0,1).",
                     "export_pretrained": "After the study (or with --table-only), copy the best seed's best.pt of "
                     "vpt, vpff and st (lowest validation score in summary.json: validation data only, never "
                     "trajectories 1/4 or the held-out set) to DIR/rigid_body_<model>.pt, with DIR/provenance.json."},
              error_prefix="rigid_body study: error: ",
              interrupted="reproduce_rigid_body: interrupted; rerun with --skip-existing to continue")


if __name__ == "__main__":  # python -m vpintegrator.studies.rigid_body
    from .driver import main

    raise SystemExit(main(STUDY))
