"""The context study of a family of systems: context-conditioned integrators
against the parameter-blind models, an unstructured in-context model and identification + classical.

The data file's system picks the rows (``SETUPS``): the rigid-body family (below) or the coupled-oscillator
family (``g_sympnet_ctx`` with the finite-difference context of k = 5 states and its oracle context, the
parameter-blind ``g_sympnet``, ``st``; identification and oracle with the symplectic ``gauss_legendre4``;
structure per state: the largest relative energy error, ``structure_per_state``; initial conditions in
``OSCILLATOR_BOX``).

Per seed and split (``parameters_interpolation`` / ``parameters_extrapolation``) each learned model is
trained with ``vp-train`` (Levenberg–Marquardt, float64, the same epochs for every model) on a
``rigid_body_family`` file. Each trained run is then rolled out on ``n_test`` **new** (initial condition,
parameters) pairs drawn from the region its split held out (``heldout_pairs``: the interpolation split's
cube inside the parameter box, or the extrapolation split's ends of the box; initial conditions uniform on
the unit sphere), the same pairs for every method of that seed. Every method reads the same prefix of
``context_len`` exact states (with observation noise σ: one draw per trajectory, the same for every
method; every method, the oracles included, starts from the noisy last prefix state). Errors are relative
to the exact flow (DOP853, 1e-12) at the horizons; a row that blew up counts as an infinite error.

Numbers per (method, split, σ, k, horizon): per seed the median over the pairs and its 10–90 % interval
(``median_interval``); over seeds the median of the per-seed medians with a percentile-bootstrap 95 %
interval (``bootstrap_ci``) and the number of seeds that meet the target (≤ 1e-3 at t = 10). Structure per
state: the largest change of the Casimir ‖z‖² between consecutive predicted states, over pairs that did not
blow up.

Rows: ``lpnet_ctx`` (finite-difference context) and the same trained step with the oracle context (the
true hθ); the parameter-blind ``lpnet`` and ``vpt``; the unstructured in-context ``st`` (standard
transformer, ``seq_len = k``); ``fd+rk4`` and ``shooting+rk4`` (identification, then RK4 with the fitted
parameters); ``oracle rk4`` (RK4 with the true parameters); ``parrot`` (context parroting: the training
trajectories' window nearest to the noisy prefix, its continuation copied; ``vpintegrator.models.parrot``;
in the runs made after it was added). The encoder ablation ``lpnet_ctx_attention``
(``--models lpnet_ctx_attention``): the same net with the attention encoder, trained by its recipe
(``RECIPES``: Adam).

    vp-gen rigid_body_family --set n_traj=600 --out datasets/rbf600.h5
    python -m vpintegrator.studies.context --data datasets/rbf600.h5 --out runs/context_study

Writes ``OUT/context_study.json`` (every per-seed number; the per-pair errors to ``ERROR_DIGITS``
significant digits), ``OUT/context_study.md`` (the tables) and the figures ``OUT/context_<axis>.png``/``.svg``
(``context_<system>_<axis>`` for a system other than the rigid body). The json accumulates: an invocation's
rows replace the rows with the same (system, split, k, σ, seed, method) and keep every other, so axes run in
separate invocations (or on both families) are tabulated together; ``--figures-only`` redraws from it (or,
with ``--results FILE``, from a shipped copy such as ``docs/data/context_oscillator.json``).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ...errors import VPIntegratorError
from ..options import Study, model_list
from ..runner import StudyError, check_out_dir
from ..stats import write_tables
from .design import (COMMON, H, HORIZONS, LEARNED, LEARNED_OSCILLATOR, LPNET_CTX, OSCILLATOR_BOX, RECIPES,  # noqa: F401
                     SETUPS, SPLITS, TARGET, ContextOptions, ContextPlan, build_plan, check_study_sizes)
from .evaluation import (_methods, data_system, evaluate_methods, exact_reference, heldout_pairs,  # noqa: F401
                         run_study, structure_per_state, train_run)
from .pretrained import SHIPPED, export_best  # noqa: F401
from .tables import (ERROR_DIGITS, ROW, SCHEMA, figures, merge_rows, read_study_json,  # noqa: F401
                     rounded_errors, summarize_rows, tables, write_compact_json)

__all__ = ["H", "TARGET", "SETUPS", "RECIPES", "heldout_pairs", "merge_rows", "data_system", "exact_reference", "evaluate_methods", "train_run", "run_study",
           "summarize_rows", "tables", "figures", "export_best", "SHIPPED", "ContextOptions", "STUDY"]


def _run(a: ContextPlan) -> int:
    out = Path(a.out)
    check_out_dir(out)
    path = out / "context_study.json"
    if a.export is not None:
        info = export_best(out, Path(a.export), data=Path(a.data) if a.data is not None else None)
        print(f"pretrained: {Path(a.export) / info['file']} <- {info['source']} (seed {info['seed']}, "
              f"validation {info['best_val']:.4g})")
        return 0
    if a.figures_only:  # --results without it: refused when parsed (options.parse_command)
        if a.results is not None:
            from ..._shipped import results_path

            path = results_path(a.results, key="results")  # a file, or a shipped results file by name
        elif not path.is_file():
            raise StudyError(f"--figures-only: {path} not found; give the --out of an earlier study (or --results)")
        rows = read_study_json(path)["rows"]
        out.mkdir(parents=True, exist_ok=True)
    else:
        if a.data is None:
            raise StudyError("--data is required (the flag, or data in the --plan file) unless --figures-only or "
                             "--export")
        system, h = data_system(Path(a.data))
        k0 = SETUPS[system]["k"]
        context_lens = a.context_lens or ([3, 5, 10, 20] if system == "rigid_body" else [5, 10, 20])
        from ...models import list_models

        # the learned rows: registered models, RECIPES rows or module:Class paths
        models = model_list(a.models, "--models", [*list_models(), *RECIPES], paths=True) if a.models \
            else list(SETUPS[system]["learned"])
        axes: list[tuple[str, int, float]] = [(split, k0, 0.0) for split in (a.splits or SPLITS)]
        axes += [("interpolation", k0, s) for s in (a.noise if a.noise is not None else [0.0, 0.001, 0.01])
                 if s != 0]
        axes += [("interpolation", k, 0.0) for k in context_lens if k != k0]
        check_study_sizes(Path(a.data), a.n_test, axes, len(models), h)  # before any training
        out.mkdir(parents=True, exist_ok=True)
        try:
            new = run_study(Path(a.data), out, a.seeds, a.epochs, a.n_test, axes, models,
                            system=system, h=h)
        except subprocess.CalledProcessError as exc:
            run = exc.cmd[exc.cmd.index("--out") + 1]
            raise StudyError(f"vp-train of {run} failed (exit {exc.returncode}; its message is above); fix it and "
                             f"run the same command again (finished runs are kept)") from None
        previous = read_study_json(path) if path.exists() else {}
        commands = previous.get("commands") or ([previous["command"]] if "command" in previous else [])
        rows = [rounded_errors(r) for r in merge_rows(previous.get("rows", []), new)]
        command = " ".join(["python -m vpintegrator.studies.context", *sys.argv[1:]])  # no path of this machine
        write_compact_json(path, {"commands": [*commands, command], "rows": rows})
    summary = summarize_rows(rows)
    write_tables(out / "context_study.md", tables(summary))
    figures(summary, out)
    print(tables(summary))
    return 0


def run(a: ContextPlan) -> int:
    try:
        return _run(a)
    except VPIntegratorError as err:
        raise StudyError(err.render(lambda key: "--" + key.replace("_", "-"))) from None


#: the study as the runner runs it (``vp-study context``, ``python -m vpintegrator.studies.context``)
STUDY = Study(ContextOptions, run, build_plan, doc=__doc__, required=("out",),
              prog="python -m vpintegrator.studies.context", error_prefix="context study: error: ",
              interrupted="context study: interrupted; run the same command again: the finished runs (those with a "
                          "complete.json) are kept, an unfinished one is trained again")
