"""The memory ladder of one case, composed from the library: the data (``generate``), the held-out conditions and
their exact flow, the learned window models (``fit``), and every row made as ``vp-rollout`` makes it (the runner's
``prepare_methods`` on the row registry ``ROW_KINDS``: the fitted rows, ``estimate+METHOD``, the GLE and the bath;
the trained models as model rows), each rolled out by the one engine (``vpintegrator.rollout.engine.rollout``) from
the same first observed window, scored against the exact flow and priced on the cost meter
(``vpintegrator.clock.meter``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from ...errors import VPIntegratorError
from ..rigid_body_results.values import stop_record
from ..runner import StudyError, in_pool
from ..stats import median_interval, read_json
from .plan import (ARENAS, ESTIMATE_CONTEXT, FITTED, H, HELDOUT_SEED, HORIZONS, LEARNED, NOISE_SEED, RECIPE,
                   SINDY_LIBRARIES, TRAINING, MemoryPlan, observe_of, windows_of)

__all__ = ["make_data", "heldout", "train_run", "train_all", "observed_system", "fit_split", "rollout_rows",
           "fitted_steps", "known_steps", "smoother_steps", "evaluate_case"]

#: interleaved repeats of the cost meter (batch 1, one held-out condition, to the last horizon)
METER_REPEATS = 3


def make_data(out: Path, arena: str, n: int | None, n_train: int, t_train: float) -> Path:
    """The training file of one case (seed 0, ``n_train`` trajectories to ``t_train`` at ``H``, DOP853 at 1e-12),
    written once under ``OUT/data``."""
    from ...data import generate, load_spec

    info = ARENAS[arena]
    path = out / "data" / f"{arena}{'' if n is None else f'_N{n}'}_n{n_train}_t{t_train:g}.h5"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        extra = {} if n is None else {"params": {"N": int(n)}}
        generate(load_spec(info["spec"], n_traj=n_train, t_end=t_train, dt=H, seed=0, **extra), out=path, workers=1)
    return path


def heldout(train: Path, arena: str, n: int | None, n_test: int, t_end: float = max(HORIZONS)
            ) -> tuple[Any, Any, np.ndarray, np.ndarray]:
    """``(full system, observation, y0, ref)``: ``n_test`` held-out initial conditions drawn from the training file's
    sampler with ``HELDOUT_SEED`` (never one of its conditions) and their observed exact flow to the last horizon
    (n_test, K, k): DOP853 at 1e-12, or for a bath above 1000 oscillators its full-order model composed to order 6
    at h = 0.01 (DOP853 on 2·10^4 components is out of reach here)."""
    from ...compiled.bath import bath_stepper
    from ...data import read_trajectories, solve_flow
    from ...data.observation import resolve_observation
    from ...rollout.splits import draw_heldout

    data = read_trajectories(train)
    full: Any = data.system
    obs = resolve_observation(observe_of(arena, n), int(data.y.shape[-1]), full.state_names, full.name)
    assert obs is not None  # every arena observes part of the state
    y0 = draw_heldout(data.meta, full, int(n_test), HELDOUT_SEED, data.y[:, 0], train)
    K = int(round(t_end / H))
    if ARENAS[arena]["bath"] and int(full.N) > 1000:
        per = int(round(H / 0.01))
        method = "bath_splitting_y6" if arena == "kac_zwanzig" else "stormer_verlet_y6"
        return full, obs, y0, bath_stepper(full, method, 0.01).run(y0, K * per)[:, ::per]
    return full, obs, y0, obs.apply(np.asarray(solve_flow(full, y0, H * np.arange(K + 1))))


# --------------------------------------------------------------------------- the learned rows


def train_run(out: Path, train: Path, case: str, arena: str, n: int | None, approach: str, T: int, seed: int,
              stop: dict[str, Any], patience: int, overwrite: bool = False) -> Path:
    """Train ``approach`` at window ``T`` with ``seed`` on the observed channels of ``train`` (the partial-observation
    study's recipe, stopped by ``stop``), unless its run directory is complete with the same stop rule (a run trained
    to another step budget or patience is trained again); returns the run directory."""
    from ...training import fit

    run = out / "runs" / case / f"{approach}_T{T}_seed{seed}"
    done = read_json(run / "summary.json") if (run / "complete.json").is_file() else None
    rule = (done or {}).get("stop_rule") or {}
    same = all(rule.get(k) == v for k, v in stop.items()) and rule.get("patience") == int(patience)
    if done is not None and same and not overwrite:
        return run
    try:
        fit({**RECIPE, **TRAINING.get(approach, {}), "data": [str(train)], "observe": observe_of(arena, n),
             "model": {**LEARNED[approach], "seq_len": int(T)}, "seed": int(seed), **stop,
             "patience": int(patience), "out": str(run)}, overwrite=run.exists())
    except (VPIntegratorError, OSError) as err:
        raise StudyError(f"training {approach} T = {T} seed {seed} on {case}: {err}") from None
    return run


def train_all(plan: MemoryPlan, trains: dict[str, Path]) -> dict[tuple[str, int, str, int], Path]:
    """Every training of the plan (``train_run``; a finished run is reused), ``plan.jobs`` processes at a time (one
    thread each): ``{(case, seed, approach, T): run directory}``."""
    tasks = [(plan.out, trains[case], case, arena, n, a, T, seed, plan.stop_keys(), plan.patience, plan.overwrite)
             for case, arena, n in plan.cases() for seed in plan.seeds for a, T in plan.training_runs()]
    keys = [(t[2], t[7], t[5], t[6]) for t in tasks]
    return dict(zip(keys, in_pool(train_run, tasks, plan.jobs if len(tasks) > 1 else 1)))


# --------------------------------------------------------------------------- the rows: vp-rollout's


def observed_system(full: Any, obs: Any, train: Path) -> Any:
    """The run's system as ``vp-rollout`` makes it for an observed run (``ObservedSystem``: the observed channels,
    the full system and the observation for the known-equations rows)."""
    from ...rollout.observed import ObservedSystem

    return ObservedSystem(dim=int(obs.dim), source=str(train), full=full, observation=obs)


def fit_split(train: Path, n_train: int) -> Any:
    """The fitted rows' ``FitSplit`` of the training file: its first 15 % validating, the rest fitted on (no test
    trajectories: the study scores held-out conditions)."""
    from ...rollout.methods import FitSplit

    n_val = max(1, int(round(0.15 * n_train)))
    return FitSplit(np.arange(n_val, n_train, dtype=np.int64), np.arange(n_val, dtype=np.int64),
                    np.zeros(0, dtype=np.int64), source="the memory study's split (the first 15 % validating)",
                    data=Path(train))


def rollout_rows(names: list[str], system: Any, train: Path, context_len: int, split: Any = None,
                 entries: list[tuple[str, Any, str]] | None = None) -> dict[str, Any]:
    """``{label: step map}`` of the ``vp-rollout`` rows ``names`` (and the models ``entries``: (label, model,
    source)) at window ``context_len``, made by the runner's own ``prepare_methods`` from the row registry
    (``vpintegrator.rollout.methods.ROW_KINDS``) as ``vp-rollout --observe ... --context-len T`` makes them: the
    same step maps, every input checked; nothing is fitted before a row starts."""
    from ...rollout.methods import StepSettings, prepare_methods

    K = int(round(max(HORIZONS) / H))
    methods = prepare_methods(list(names), list(entries or []), system, H, 0.0, K, Path(train),
                              StepSettings(context_len=int(context_len)), split)
    return {m.label: m.step_map for m in methods}


def fitted_steps(system: Any, train: Path, split: Any, T: int) -> dict[str, Any]:
    """The fitted rows at window ``T`` (``FITTED``; delay SINDy up to ``SINDY_MAX_T``, on the polynomial
    libraries ``SINDY_LIBRARIES``, and only with pysindy), fitted on ``split`` of the training file."""
    from ...models import fitted_class

    names = [name for name in FITTED if T in windows_of(name, [T]) and fitted_class(name).available()]
    rows = rollout_rows(names, system, train, T, split)
    for step in rows.values():
        if hasattr(step, "restrict"):  # the SINDy grid narrowed to the polynomial libraries
            step.restrict(list(SINDY_LIBRARIES))
    return rows


def known_steps(arena: str, system: Any, train: Path) -> dict[str, Any]:
    """The known-equations and full-order rows (``ARENAS[arena]["known"]``), the ``vp-rollout`` rows of those names:
    ``estimate+METHOD`` (the full state by least squares on the true flow from the first ``ESTIMATE_CONTEXT``
    observed states, then METHOD at ``H`` or the exact flow); ``gle`` (the exact kernel fitted by exponentials
    within ``GLE_FIT_TOL``) at ``H``; ``bath+METHOD``, the full-order model from the true full state (the bath at
    rest around the first observed particle state) at ``H``: Verlet (order 2) and, near round-off, its order-6
    composition (``_y6``, 7 sub-steps)."""
    return rollout_rows(list(ARENAS[arena]["known"]), system, train, ESTIMATE_CONTEXT)


def smoother_steps(arena: str, system: Any, train: Path, T: int) -> dict[str, Any]:
    """The rows of ``known_steps`` over the whole first window of ``T`` observed states (a batch smoother: with
    observation noise it averages over the window instead of trusting its first states), the ``vp-rollout`` rows at
    ``--context-len T``: on the oscillator ``estimate+METHOD``, the initial state by least squares on the true flow
    over all ``T``, carried to the window's last state, then METHOD; on a bath every known row ``ROW`` (``gle``,
    ``bath+METHOD``, which start from the first observed state) as ``estimate+ROW``, the particle's first state by
    least squares on the row's own flow over the ``T`` states (``WindowEstimatedStep``), then the row."""
    known = ARENAS[arena]["known"]
    names = [f"estimate+{name}" for name in known] if ARENAS[arena]["bath"] else \
        [name for name in known if name.startswith("estimate+")]
    return rollout_rows(names, system, train, T) if names else {}


def _learned(system: Any, train: Path, runs: dict[tuple[str, int], Path]
             ) -> Iterator[tuple[str, int, Any, dict[str, Any]]]:
    """(approach, T, step map, record) of each trained run of one seed: the model (in float64) as a
    ``vp-rollout`` model row."""
    from ...models import load_model

    for (approach, T), run in sorted(runs.items()):
        summary = read_json(run / "summary.json") or {}
        record = {"fit_cpu": summary.get("cpu_time"), "steps": summary.get("steps"),
                  **stop_record(summary),
                  "n_params": summary.get("n_params"), "run": run.name}
        step = rollout_rows([], system, train, int(T), entries=[(run.name, load_model(run).double(), str(run))])
        yield approach, int(T), step[run.name], record


# --------------------------------------------------------------------------- scoring and pricing


def _errors(y: np.ndarray, ref: np.ndarray, times: tuple[float, ...]) -> dict[float, dict[str, Any]]:
    """Per horizon of ``times``, the median and 10-90 % interval over conditions of the relative error (a failed
    rollout: inf)."""
    out = {}
    for t in times:
        k = int(round(t / H))
        e = np.linalg.norm(y[:, k] - ref[:, k], axis=-1) / np.linalg.norm(ref[:, k], axis=-1)
        out[t] = median_interval([float(v) if np.isfinite(v) else math.inf for v in e])
    return out


def _window(ref: np.ndarray, length: int, sigma: float) -> np.ndarray:
    """The first ``length`` observed states, with observation noise ``sigma`` (one draw, ``NOISE_SEED``)."""
    w = np.array(ref[:, :length], dtype=np.float64)
    if sigma > 0:
        w += sigma * np.random.default_rng(NOISE_SEED).standard_normal(w.shape)
    return w




def _fitted_record(step: Any) -> dict[str, Any]:
    """A fitted row's skill (``skill``: its validation score below ``SKILL_FRACTION`` of the identity map's on the
    same validation windows), with a ``note`` when it has none, and its search's budget (``fit_budget``); {} for a
    row without validation (``parrot``)."""
    from ...models.memory import SKILL_FRACTION

    skill = getattr(step, "skill", None)
    out: dict[str, Any] = {} if getattr(step, "budget", None) is None else {"fit_budget": str(step.budget)}
    if skill is None:
        return out
    out["skill"] = bool(skill)
    if not skill:
        fit = getattr(step, "fit", None)
        score = None if fit is None else float(fit.score)
        best = "no candidate scored below 1 (no model)" if score is None else \
            f"the best validation error {score:.3g} is not below {SKILL_FRACTION:g} x the identity map's"
        out["note"] = (f"no skill: {best} (the identity map's: {float(step.identity_score):.3g}; "
                       f"{len(step.candidates)} candidates; fit {float(step.fit_seconds):.3g} CPU s)")
    return out


def _score(rows: dict[str, tuple[Any, dict[str, Any]]], ref: np.ndarray, noise: tuple[float, ...],
           base: dict[str, Any], width: int, calls: dict[tuple[str, Any], Callable[[], float]],
           times: tuple[float, ...] = HORIZONS) -> list[dict[str, Any]]:
    """Roll every row out from the first window at each noise level and score it; its price's call (``_price``:
    batch 1, the sigma = 0 window of the first condition, to the last horizon) into ``calls``, keyed (label, seed)."""
    from ...rollout.engine import price_seconds, rollout

    K = int(round(max(times) / H))
    width = max([int(width)] + [s.seq_len for s, _ in rows.values()])
    out = []
    for sigma in noise:
        window = _window(ref, width, sigma)
        for label, (step, record) in rows.items():
            y = rollout(step, window[:, :step.seq_len], H, K).y
            fit_cpu = record.get("fit_cpu")
            if fit_cpu is None and math.isfinite(getattr(step, "fit_seconds", math.nan)):
                fit_cpu = float(step.fit_seconds)
            errs = _errors(y, ref, times)
            out.append({**base, **record, "label": label, "T": record.get("T", int(step.seq_len)), "noise": sigma,
                        "fit_cpu": fit_cpu, **({} if record.get("kind") != "fitted" else _fitted_record(step)),
                        **{f"err_t{t:g}": errs[t] for t in times}})
    one = _window(ref[:1], width, 0.0)

    def call(s: Any) -> Callable[[], float]:
        def once() -> float:  # the row's price: the engine's seconds of its start and steps, not of the call
            return price_seconds(rollout(s, one[:, :s.seq_len], H, K).meta)
        return once

    calls.update({(label, record.get("seed")): call(step) for label, (step, record) in rows.items()})
    return out


def _price(rows: list[dict[str, Any]], calls: dict[tuple[str, Any], Callable[[], float]],
           t_end: float = max(HORIZONS)) -> list[dict[str, Any]]:
    """Every row of a case priced in one interleaved meter call (``vpintegrator.clock.meter``, thread CPU): each
    call returns the engine's own seconds (``vpintegrator.rollout.engine.PRICE_OF``); ``cost`` CPU s per unit
    time, ``cost_per_step`` per step, ``cost_seconds`` the whole rollout to the last horizon."""
    from ...clock import meter
    from ...rollout.engine import PRICE_OF

    K = int(round(t_end / H))
    costs = meter(calls, repeats=METER_REPEATS)
    for r in rows:
        c = costs[(r["label"], r.get("seed"))]
        r.update(cost=c.per(t_end), cost_per_step=c.per(K), cost_seconds=c.seconds, cost_clock=c.clock,
                 cost_of=PRICE_OF)
    return rows


def evaluate_case(plan: MemoryPlan, case: str, arena: str, n: int | None, train: Path,
                  runs: dict[tuple[str, int, str, int], Path]) -> list[dict[str, Any]]:
    """Every row of one case: the known-equations / full-order rows and the fitted rows once (seed None), the learned
    rows per seed, each rolled out and scored; then every row of the case priced in one interleaved meter call
    (``_price``)."""
    import torch

    from ...data import read_metadata

    torch.set_num_threads(1)
    times = plan.score_times
    full, obs, _, ref = heldout(train, arena, n, plan.n_test, max(times))
    system, split = observed_system(full, obs, train), fit_split(train, int(read_metadata(train)["n_traj"]))
    base = {"system": case, "arena": arena, "N": n, "observe": ARENAS[arena]["observe"]}
    known: dict[str, tuple[Any, dict[str, Any]]] = {
        label: (step, {"approach": label, "kind": "known" if label in ("gle",) or label.startswith("estimate")
                       else "full_order", "seed": None}) for label, step in known_steps(arena, system, train).items()}
    whole = max(plan.windows)
    width = max(whole, ESTIMATE_CONTEXT)  # every row's window is the head of one noisy draw of this many states
    first = 1 if ARENAS[arena]["bath"] else ESTIMATE_CONTEXT  # the states the known rows read
    if whole > first:  # the same rows over the whole (longest) window: the batch smoother
        known.update({f"{label}_T{whole}": (step, {"approach": label, "T": whole, "seed": None,
                                                   "kind": "full_order" if "bath+" in label else "known"})
                      for label, step in smoother_steps(arena, system, train, whole).items()})
    calls: dict[tuple[str, Any], Callable[[], float]] = {}  # every row's price, metered together at the end
    rows = _score(known, ref, plan.noise, base, width, calls, times)
    for T in plan.windows:
        fitted = {f"{name}_T{T}": (step, {"approach": name, "T": T, "kind": "fitted", "seed": None})
                  for name, step in fitted_steps(system, train, split, T).items()}
        if fitted:
            rows += _score(fitted, ref, plan.noise, base, width, calls, times)
    for seed in plan.seeds:
        mine = {(a, T): run for (c, s, a, T), run in runs.items() if c == case and s == seed}
        for T in plan.windows:
            learned = {f"{a}_T{t}": (step, {**rec, "approach": a, "T": t, "kind": "model", "seed": int(seed)})
                       for a, t, step, rec in _learned(system, train, {k: v for k, v in mine.items() if k[1] == T})}
            if learned:
                rows += _score(learned, ref, plan.noise, base, width, calls, times)
    return _price(rows, calls, max(times))
