"""The unknown-form study's evaluation: every row of a (system, σ, seed) on the held-out exact flow (errors at
the horizons, structure, batch-1 cost, training CPU), and the study's loop (data, trainings, evaluation)."""

from __future__ import annotations

import math
import time
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ...errors import VPIntegratorError
from ..stats import fmt_g, read_json, relative_errors
from .design import APPROACHES, CASIMIR_STEPS, H, HORIZONS, ORACLE, RECIPES, SYSTEMS, VALIDATION, StopRule
from .runs import chosen, make_data, noisy_copy, run_dir, train_one
from ...quantiles import median

# --------------------------------------------------------------------------- evaluation


def _structure(kind: str, y: np.ndarray, system) -> float | None:
    """Largest Casimir change |‖z_n‖² − ‖z_0‖²| or relative energy error |H(z_n) − H(z_0)| / |H(z_0)| (the
    true H) over the rollouts that stayed finite; None when none did."""
    ok = np.isfinite(y).all(axis=(1, 2))
    if not ok.any():
        return None
    y = y[ok]
    if kind == "casimir":
        c = np.sum(y ** 2, axis=-1)
        return float(np.abs(c - c[:, :1]).max())
    e = np.stack([system.hamiltonian(row) for row in y])
    return float((np.abs(e - e[:, :1]) / np.abs(e[:, :1])).max())


#: interleaved rounds of the cost meter (every row of a cell once per round)
METER_REPEATS = 3


def batch1_costs(calls: dict[str, tuple[Any, np.ndarray]], n_steps: int) -> dict[str, dict[str, Any]]:
    """``{label: {cost, runner, cost_setup, cost_clock, cost_repeats}}``: every row of one cell priced alike on
    the cost meter (``vpintegrator.clock.meter``: one cold call, its compilation and first-call work reported
    apart as ``cost_setup``, then the minimum over ``METER_REPEATS`` rounds in which every row runs once in turn,
    thread CPU), as the other studies price their rows. A row's call is one batch-1 rollout of ``n_steps`` steps
    by its step map ``calls[label] = (step, z0)`` from one held-out condition ``z0`` (the engine's ``seconds``:
    the work producing states); ``cost`` is CPU seconds per unit time. A row whose batch-1 rollout raises has no
    cost (``math.nan``)."""
    from ...clock import meter_surviving
    from ...rollout import rollout

    def call(step: Any, z0: np.ndarray) -> Callable[[], Any]:
        return lambda: rollout(step, z0[None, None], H, n_steps, chunk_steps=16384).meta.get("seconds")

    costs, _ = meter_surviving({label: call(step, z0) for label, (step, z0) in calls.items()},
                               repeats=METER_REPEATS)
    out: dict[str, dict[str, Any]] = {}
    for label, (step, _) in calls.items():
        c = costs.get(label)
        out[label] = {"cost": math.nan if c is None else c.per(n_steps * H),
                      "runner": str(step.describe().get("runner", "?")),
                      "cost_setup": None if c is None else c.setup_seconds,
                      "cost_clock": None if c is None else c.clock, "cost_repeats": METER_REPEATS}
    return out


def _casimir_long(model, y0: np.ndarray) -> float:
    """|‖z_n‖² − ‖z_0‖²| max over CASIMIR_STEPS steps of lphnn + implicit midpoint from a few initial
    conditions (batch 1: the compiled stepper)."""
    from ...rollout import rollout
    from ...rollout.field import field_step

    worst = 0.0
    for z in y0:
        y = rollout(field_step(model, H, "implicit_midpoint"), z[None, None], H, CASIMIR_STEPS).y[0]
        if not np.isfinite(y).all():
            return math.inf
        c = np.sum(y ** 2, axis=-1)
        worst = max(worst, float(np.abs(c - c[0]).max()))
    return worst


def evaluate_seed(system: str, sigma: float, seed: int, trained: dict[str, dict[str, Any]], train_file: Path,
                  test_file: Path, log: Callable[[str], None] = print) -> list[dict[str, Any]]:
    """Every row of one (system, σ, seed): per held-out initial condition the relative error at HORIZONS,
    the structure measure, training CPU, and the batch-1 cost of every row priced alike (``batch1_costs``, after
    the error rollouts: ``eval_cpu`` is the held-out rollouts' process CPU alone); one dict per row."""
    from ...data import read_trajectories
    from ...data.trajectory_files import read_metadata
    from ...models import load_model
    from ...rollout import IntegratorStep, ModelStep, rollout
    from ...rollout.field import field_step
    from ...rollout.sindy import SindyStep, select_sindy
    from ...systems.registry import system_from_meta

    test = read_trajectories(test_file)
    truth = system_from_meta(read_metadata(test_file), where=test_file)
    ref = test.y
    n_steps = ref.shape[1] - 1
    rng = np.random.default_rng(np.random.SeedSequence([43, 6, seed, int(round(sigma * 1e9))]))
    y0 = ref[:, 0] + (sigma * rng.normal(size=ref[:, 0].shape) if sigma > 0 else 0.0)
    kind = SYSTEMS[system]["structure"]

    # the fitted rows use the training and validation trajectories of the learned runs' split
    first = next(iter(trained.values()), None)
    summary = read_json(first["run"] / "summary.json") if first else None
    data = read_trajectories(train_file).y
    if summary and "split" in summary:
        tr_idx, va_idx = summary["split"]["train"], summary["split"]["val"]
    else:  # no learned run recorded one: vp-train's split of these settings (the one rule, split_seed 0)
        from ...data.windows import DEFAULT_SPLIT, split_train_val_test

        tr_idx, va_idx, _ = split_train_val_test(len(data), VALIDATION["val_fraction"], VALIDATION["test_fraction"],
                                                 DEFAULT_SPLIT[2])
    train, val = data[np.asarray(tr_idx)], data[np.asarray(va_idx)]

    rows: list[dict[str, Any]] = []
    makers: list[tuple[str, str, Callable[[], Any], float, dict]] = []  # label, approach, make, train_cpu, extra
    for approach, info in trained.items():
        model = load_model(info["run"] / "best.pt").double()
        extra = {"point": info["point"], "n_params": info["sweep"][info["point"]]["n_params"]}
        methods = RECIPES[approach][2]
        if methods is None:
            makers.append((approach, approach, partial(ModelStep, model, device="cpu"), info["train_cpu"], extra))
        else:
            for m in methods:
                makers.append((f"{approach}@{m}", approach, partial(field_step, model, H, m), info["train_cpu"],
                               extra))
    tic = time.process_time()
    sindy = SindyStep(train, val, ORACLE, H)
    fit = sindy.fit_now()
    sindy_cpu = time.process_time() - tic
    makers.append(("sindy+gauss_legendre4", "sindy", lambda: sindy, sindy_cpu,
                   {"equations": fit.field.equations() if fit and fit.field else None,
                    "library": fit.library if fit else None, "threshold": fit.threshold if fit else None}))
    tic = time.process_time()
    wrong, _ = select_sindy(train, val, H, ORACLE, libraries=["poly2"])
    wrong_cpu = time.process_time() - tic
    if wrong is not None and wrong.field is not None:
        makers.append(("poly2+gauss_legendre4", "poly2", lambda: IntegratorStep(wrong.field, ORACLE, H), wrong_cpu,
                       {"equations": wrong.field.equations(), "threshold": wrong.threshold}))
    else:
        rows.append(_failed_row("poly2+gauss_legendre4", "no degree-2 polynomial fit has skill on the validation "
                                "trajectories", HORIZONS, wrong_cpu))
    makers.append(("oracle gauss_legendre4", "oracle", lambda: IntegratorStep(truth, ORACLE, H), 0.0, {}))

    metered: dict[str, tuple[Any, np.ndarray]] = {}
    for label, approach, make, train_cpu, extra in makers:
        tic = time.process_time()
        try:
            y = rollout(make(), y0[:, None], H, n_steps).y
        except VPIntegratorError as err:
            rows.append(_failed_row(label, str(err), HORIZONS, train_cpu))
            continue
        ok = np.isfinite(y).all(axis=(1, 2))
        errors = dict(zip((f"{t:g}" for t in HORIZONS),
                          relative_errors(y, ref, [int(round(t / H)) for t in HORIZONS]).values()))
        if ok.any():  # priced below, with every row of the cell: from the first condition that stayed finite
            metered[label] = (make(), y0[int(np.argmax(ok))])
        row = {"method": label, "approach": approach, "errors": errors, "structure": _structure(kind, y, truth),
               "structure_kind": kind, "failed": int((~ok).sum()), "cost": math.nan, "runner": "?",
               "train_cpu": float(train_cpu), "eval_cpu": time.process_time() - tic, **extra}
        if label == "lphnn@implicit_midpoint":
            model = load_model(trained["lphnn"]["run"] / "best.pt").double()
            row["casimir_long"] = _casimir_long(model, y0[:2])
        rows.append(row)
    costs = batch1_costs(metered, n_steps)
    for row in rows:
        row.update(costs.get(row["method"], {}))
        if row["failed"] >= 0:  # -1: a row that could not be made (its failure says why)
            log(f"{system} σ={sigma:g} seed {seed} {row['method']}: t=10 median {median(row['errors']['10']):.3g}, "
                f"{kind} {fmt_g(row['structure'])}, cost {fmt_g(row['cost'])} s/unit time, failed {row['failed']}")
    for approach, info in trained.items():
        for r in rows:
            if r["approach"] == approach:
                r["sweep"] = [{k: v for k, v in p.items()} for p in info["sweep"]]
                break
    return rows


def _failed_row(label: str, why: str, horizons: Sequence[float], train_cpu: float) -> dict[str, Any]:
    return {"method": label, "approach": label.split("+")[0], "errors": {f"{t:g}": [math.inf] for t in horizons},
            "structure": None, "structure_kind": None, "failed": -1, "cost": math.nan, "runner": "?",
            "train_cpu": float(train_cpu), "failure": why}


def run_study(out: Path, systems: Sequence[str], seeds: Sequence[int], noises: Sequence[float], *,
              n_train: int, n_test: int, budget: float, sweep: int, jobs: int = 2, ceiling: float = 3.0,
              data: Path | None = None, overwrite: bool = False, log: Callable[[str], None] = print,
              save: Callable[[list[dict[str, Any]]], None] | None = None,
              rule: StopRule | None = None) -> list[dict[str, Any]]:
    """Generate the data (``data``: a training file of the first system in place of the generated one), train
    every approach's sweep per (seed, system, σ) and evaluate every row. Seeds are the outer loop, and
    ``save`` (if given) receives the rows after every (seed, system, σ): a run stopped early keeps whole
    seeds of every system."""
    rows: list[dict[str, Any]] = []
    files = {}
    for system in systems:
        train_clean, test_file = make_data(out, system, n_train, n_test)
        files[system] = (data if data is not None else train_clean, test_file)
    for seed in seeds:
        for system in systems:
            train_clean, test_file = files[system]
            for sigma in noises:
                train_file = noisy_copy(train_clean, sigma)
                jobs_list = [(a, p, run_dir(out, system, sigma, a, p, seed)) for a in APPROACHES[system]
                             for p in range(min(sweep, len(RECIPES[a][3])))]
                with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
                    list(pool.map(lambda j: train_one(train_file, j[2], j[0], j[1], seed, budget, ceiling,
                                                       overwrite, rule), jobs_list))
                trained = {a: chosen(out, a, [r for b, _, r in jobs_list if b == a]) for a in APPROACHES[system]}
                for r in evaluate_seed(system, sigma, seed, trained, train_file, test_file, log):
                    rows.append({"system": system, "noise": float(sigma), "seed": int(seed),
                                 "stop_rule": (rule or StopRule()).describe(), **r})
                if save is not None:
                    save(rows)
    return rows

