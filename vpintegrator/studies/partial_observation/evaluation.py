"""The partial-observation study's rows: every trained run of a seed (and its ablations, the fixed rows) rolled
out from the held-out conditions and scored on the observed channels and in the full state."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..rigid_body_results.values import stop_record
from ..runner import StudyError
from ..stats import median_interval, read_json, relative_errors
from .data import heldout_data
from .design import (ABLATED, ATTENTION, DELAY_SINDY, FIXED_ROWS, FULL_CONTEXT, FULL_STATE, H, HELDOUT_SEED,
                     HORIZONS, SYSTEMS)
from .training import _curve


def full_state_errors(system: Any, observation: Any, y_obs: np.ndarray, ref_full: np.ndarray,
                      steps: Sequence[int]) -> dict[int, list[float]]:
    """The full-state relative error of an observed rollout ``y_obs`` (n, K, k) at each step of ``steps``:
    the full state at step k estimated from its observed states k − 2, k − 1, k by least squares on the true
    flow (``estimate_states``, the estimation rows' estimator), against ``ref_full`` (n, K, d), the exact flow
    in the full state; inf where the rollout failed or left the data's scale (|y| above 1e3 times the
    reference's largest)."""
    from ...rollout.observed import estimate_states

    out = {}
    bound = 1e3 * float(np.max(np.abs(ref_full)))
    for k in steps:
        w = y_obs[:, k - FULL_CONTEXT + 1:k + 1]
        ok = np.all(np.isfinite(w), axis=(1, 2)) & (np.max(np.abs(w), axis=(1, 2)) < bound)
        e = np.full(len(w), math.inf)
        if ok.any():
            z, _ = estimate_states(system, observation, w[ok], H)
            e[ok] = np.linalg.norm(z - ref_full[ok, k], axis=-1) / np.linalg.norm(ref_full[ok, k], axis=-1)
        out[k] = [float(v) if np.isfinite(v) else math.inf for v in e]
    return out


def delay_sindy(train_obs: np.ndarray, first: np.ndarray, n_steps: int, T: int = DELAY_SINDY[1],
                method: str = DELAY_SINDY[2]) -> tuple[np.ndarray, dict[str, Any]]:
    """Delay-coordinate SINDy: ``select_sindy`` (the ``sindy+METHOD`` rows' fit and selection by validation
    rollout) on the delay vectors z_n = (x_n, …, x_{n+T−1}) of the observed training trajectories ``train_obs``
    (n, K, k; the first 15 % of them the validation set), the chosen field integrated by ``method`` at ``H``
    from each held-out condition's first delay vector (its first T observed states, ``first`` (m, ≥ T, k)).

    Returns the observed rollout (m, n_steps + 1, k): the first T − 1 states as given, then the delay
    vector's last block; NaN where the fit has no skill or a trajectory's integration failed), and what was
    chosen (library, threshold, terms, validation score). The row is the rollout row ``delay_sindy+METHOD``
    ([`DelaySindyStep`][vpintegrator.rollout.delay_sindy.DelaySindyStep], its NumPy integrator path), run by
    the rollout engine with no blow-up bound; a held-out condition whose integration fails is NaN from its
    first delay vector on."""
    from ...rollout.delay_sindy import DelaySindyStep
    from ...rollout.engine import rollout

    train_obs = np.asarray(train_obs, dtype=np.float64)
    n_val = max(1, int(round(0.15 * len(train_obs))))
    step = DelaySindyStep(train_obs[n_val:], train_obs[:n_val], method, H, context_len=T, compiled=False)
    fit = step.fit_now()
    m, k = first.shape[0], first.shape[-1]
    pred = np.full((m, n_steps + 1, k), np.nan)
    pred[:, :T - 1] = first[:, :T - 1]
    if fit is None or fit.field is None:
        return pred, {"fit": None}
    out = rollout(step, np.ascontiguousarray(first[:, :T], dtype=np.float64), H, n_steps, blowup=math.inf)
    ok = np.ones(m, dtype=bool) if out.failed_step is None else out.failed_step < 0
    pred[ok, T - 1:] = out.y[ok, T - 1:]
    return pred, {"fit": {"library": fit.library, "threshold": fit.threshold, "n_terms": fit.n_terms,
                          "val_score": fit.score}}


#: interleaved repeats of the cost meter (batch 1, the first held-out condition, to the last horizon)
METER_REPEATS = 3


def batch1_costs(rows: dict[str, tuple[Any, np.ndarray]], n_steps: int) -> dict[str, tuple[float, str]]:
    """``{label: (cost, clock)}``: each learned row's batch-1 CPU seconds per unit time, priced alike on the cost
    meter (``vpintegrator.clock.meter``: one cold call, then the minimum over ``METER_REPEATS`` interleaved
    rounds, thread CPU, as the memory study prices its rows): one rollout of ``n_steps`` states by the row's model
    step map (``vp-rollout``'s: ``model_step``, one per row, reused by every call) from ``rows[label] = (model,
    window)``, the first held-out condition's first window (1, seq_len, dim), priced at the engine's own seconds of
    its start and steps (``vpintegrator.rollout.engine.price_seconds``: the rule of every price in the package). A row whose batch-1 rollout raises (a trained model that fails, as its held-out
    rollouts say) has no cost, said in one line."""
    from ...clock import meter_surviving
    from ...rollout.engine import price_seconds, rollout
    from ...rollout.methods import model_step

    def call(model: Any, window: np.ndarray) -> Any:
        step = model_step(model)
        first = np.ascontiguousarray(window[:, :step.seq_len], dtype=np.float64)

        def once() -> float:
            return price_seconds(rollout(step, first, H, int(n_steps)).meta)
        return once

    costs, failed = meter_surviving({label: call(model, window) for label, (model, window) in rows.items()},
                                    repeats=METER_REPEATS)
    for label, exc in failed.items():
        print(f"partial_observation: {label}: no batch-1 cost: its rollout failed ({type(exc).__name__}: {exc})",
              flush=True)
    return {label: (c.per(n_steps * H), c.clock) for label, c in costs.items()}


def _has_pysindy() -> bool:
    import importlib.util

    return importlib.util.find_spec("pysindy") is not None

def evaluate_seed(out: Path, train: Path, n_test: int, system: str, seed: int, runs: dict[tuple[str, int], Path],
                  with_fixed: bool) -> list[dict[str, Any]]:
    """Roll out every trained run of one seed (and its VPT ablations; the fixed rows when ``with_fixed``) from
    ``n_test`` held-out conditions (drawn from ``train``'s sampler, seed ``HELDOUT_SEED``) to t = 100, observed;
    one row per label with the per-condition medians at ``HORIZONS``, on the observed channels and in the full
    state (``full_state_errors``; a full-state model's directly), and each learned row's batch-1 cost
    (``batch1_costs``: ``cost``, CPU s per unit time). The parrot learns from ``train``'s training
    split (the models'), never from a held-out condition."""
    import torch

    from ...data import read_rollout, read_trajectories, solve_flow
    from ...data.observation import observation_from_record, resolve_observation
    from ...models import load_model, mean_attention, without_attention
    from ...rollout import RolloutConfig, run_rollouts
    from ...rollout.splits import draw_heldout
    from ...testing import attention_coupling

    info = SYSTEMS[system]
    train_data = read_trajectories(train)
    full: Any = train_data.system
    steps = [int(round(t / H)) for t in HORIZONS]
    held = heldout_data(out, system, n_test)
    obs: Any = None
    if held is None:
        obs = resolve_observation(info["observe"], int(train_data.y.shape[-1]), full.state_names, full.name)
        assert obs is not None  # every study system observes part of its state
        heldout_y0 = draw_heldout(train_data.meta, full, int(n_test), HELDOUT_SEED, train_data.y[:, 0], train)
        ref_full = np.asarray(solve_flow(full, heldout_y0, H * np.arange(max(steps) + 1)))  # type: ignore[arg-type]
    else:  # fixed held-out conditions: their file is the exact flow (DOP853 at 1e-12) to t = 100
        ref_full = np.asarray(read_trajectories(held).y)
    entries: list[tuple[str, Any]] = []
    full_entries: list[tuple[str, Any]] = []
    meta: dict[str, dict[str, Any]] = {}
    priced: dict[str, tuple[Any, np.ndarray]] = {}  # label -> (model, the first held-out condition's window)
    for (approach, T), run in sorted(runs.items()):
        model = load_model(run).double()
        summary = read_json(run / "summary.json") or {}
        base = {"approach": approach, "T": int(T), "n_params": summary.get("n_params"),
                "train_cpu": summary.get("cpu_time"), "epochs": summary.get("epochs"),
                "best_epoch": summary.get("best_epoch"), **stop_record(summary),
                "best_val": summary.get("best_loss"), "run": str(run.relative_to(out)), "curve": _curve(run),
                "steps": summary.get("steps"), "stop_rule": summary.get("stop_rule")}
        label = f"{approach}_T{T}"
        if approach in FULL_STATE:
            full_entries.append((label, model))
            meta[label] = {**base, "kind": "full_state", "coupling": None}
            priced[label] = (model, ref_full[:1, :1])
            continue
        model_obs = observation_from_record(getattr(model, "trained_on")["observation"])
        assert model_obs is not None
        if held is not None:  # a basis fitted on the training split: the same split, hence the same, for every run
            if obs is None:
                obs = model_obs
            np.testing.assert_allclose(model_obs.matrix, obs.matrix, rtol=0, atol=1e-12)
        windows = torch.as_tensor(model_obs.apply(ref_full[:, :T]))
        coupling = None
        if approach in ATTENTION and T > 1:
            coupling = float(attention_coupling(model, windows).median)
        entries.append((label, model))
        meta[label] = {**base, "kind": "model", "coupling": coupling}
        first = windows[:1].numpy()
        priced[label] = (model, first)
        if approach in ABLATED and T > 1:
            ref_windows = torch.as_tensor(model_obs.apply(train_data.y[:, :T]))
            entries.append((f"{label}+noattn", without_attention(model)))
            entries.append((f"{label}+meanattn", mean_attention(model, ref_windows)))
            priced[f"{label}+noattn"], priced[f"{label}+meanattn"] = (entries[-2][1], first), (entries[-1][1], first)
            meta[f"{label}+noattn"] = {**base, "approach": f"{approach}+noattn", "kind": "ablation", "curve": None}
            meta[f"{label}+meanattn"] = {**base, "approach": f"{approach}+meanattn", "kind": "ablation",
                                         "curve": None}
    integrators = list(info.get("fixed", FIXED_ROWS)) if with_fixed else []
    for name in integrators:
        meta[name] = {"approach": name, "T": int(info["context_len"]), "kind": "known" if "estimate" in name else
                      "fitted"}
    folder = out / "rollouts"
    folder.mkdir(parents=True, exist_ok=True)
    observed: dict[str, np.ndarray] = {}
    full_y: dict[str, np.ndarray] = {}
    common: dict[str, Any] = dict(data=str(train), t_end=max(HORIZONS), heldout=int(n_test),
                                  heldout_seed=HELDOUT_SEED, volume=False, workers=1, device="cpu")
    observe = info["observe"]
    if held is not None:  # the held-out file's conditions, the fitted rows fitted on the training file
        common = dict(data=str(held), fit_data=str(train), t_end=max(HORIZONS), volume=False, workers=1, device="cpu")
        observe = None  # the basis the models recorded
        if obs is None:
            raise StudyError(f"partial_observation: {system} needs at least one learned approach on the observation "
                             "(its basis is fitted by training)")
    if entries or integrators:
        path = folder / f"{system}_seed{seed}.h5"
        run_rollouts(RolloutConfig(out=str(path), models=entries, integrators=integrators, observe=observe,
                                   context_len=int(info["context_len"]), **common), overwrite=True)
        ro = read_rollout(path)
        assert ro.reference is not None  # a run of the exact flow writes its reference
        # the held-out conditions here are the rollout's: the same sampler, the same seed
        np.testing.assert_allclose(np.asarray(ro.reference.y), obs.apply(ref_full[:, :ro.reference.y.shape[1]]),
                                   rtol=1e-8, atol=1e-8)
        observed = {label: np.asarray(ro.methods[label].y) for label in meta if label in ro.methods}
    if full_entries:
        path = folder / f"{system}_seed{seed}_full_state.h5"
        run_rollouts(RolloutConfig(out=str(path), models=full_entries, integrators=[], **common), overwrite=True)
        ro = read_rollout(path)
        for label, _ in full_entries:
            full_y[label] = np.asarray(ro.methods[label].y)
            observed[label] = obs.apply(full_y[label])
    ref = obs.apply(ref_full)
    if with_fixed and not _has_pysindy():
        from ...rollout.sindy_library import INSTALL

        print(f"partial_observation: {DELAY_SINDY[0]} left out: it needs pysindy, an optional extra: {INSTALL}",
              flush=True)
    elif with_fixed:
        label, T_sindy, _ = DELAY_SINDY
        # the training file's trajectories (the models' training and validation split together, as here its
        # own 15 % validate); no held-out condition
        observed[label], chosen = delay_sindy(obs.apply(train_data.y), ref, max(steps))
        meta[label] = {"approach": label, "T": T_sindy, "kind": "fitted", "sindy": chosen}
    costs = batch1_costs(priced, max(steps)) if priced else {}
    rows = []
    for label, row in meta.items():
        errs = relative_errors(observed[label], ref, steps)
        if label in full_y:
            ferrs = relative_errors(full_y[label], ref_full, steps)
        elif held is not None:  # decoded by the reduction's basis
            ferrs = relative_errors(obs.decode(observed[label]), ref_full, steps)
        else:
            ferrs = full_state_errors(full, obs, observed[label], ref_full, steps)
        rows.append({"system": system, "observe": info["observe"], "seed": None if row["kind"] in ("known", "fitted")
                     else int(seed), "label": label, **row,
                     **({"cost": costs[label][0], "cost_clock": costs[label][1]} if label in costs else {}),
                     **{f"err_t{t:g}": median_interval(errs[k]) for t, k in zip(HORIZONS, steps)},
                     **{f"full_err_t{t:g}": median_interval(ferrs[k]) for t, k in zip(HORIZONS, steps)}})
    return rows

