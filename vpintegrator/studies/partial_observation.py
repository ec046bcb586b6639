"""The study "when the state is incomplete" (the documentation page of that name): multi-step models on
observed windows against the window without attention, the attention ablations, state estimation + the true
equations, and parroting.

Systems (``SYSTEMS``): the coupled oscillator observed in q (2 of 4 components; data from the
``coupled_oscillator_box`` spec) and the rigid body observed in (z1, z2) (2 of 3; the ``rigid_body`` spec,
initial conditions on the unit sphere). Data: ``n_train`` trajectories to ``t_train`` at h = 0.2 (DOP853,
1e-12), and ``n_test`` held-out initial conditions drawn from the file's own sampler with another seed
(``vp-rollout --heldout``; no model, and not the parrot, sees them), their exact flow (DOP853, 1e-12) to
t = 100. Training and rollout see the observed channels only
(``observe``); errors are on the observed channels against the exact flow, per held-out condition,
``‖ŷ(t) − y(t)‖ / ‖y(t)‖`` at t = 10 and t = 100.

Approaches (``APPROACHES``), each at every window length T of ``windows``:

- ``vpt`` (the volume-preserving transformer: window of T to the next T) and ``st`` (the standard
  transformer, softmax attention), the multi-step models with attention;
- ``delay_mlp`` and ``delay_vpff`` (``vpintegrator.models.delay``): the window without attention, one step
  from the concatenated window and a volume-preserving map of the whole window: the control that says whether
  attention adds anything over the window;
- per trained VPT (T > 1) its ablations as rows: ``+noattn`` (every attention the identity,
  ``without_attention``) and ``+meanattn`` (every attention's Λ(X) replaced by the constant Cayley of its
  mean C over the training windows, ``mean_attention``);
- ``estimate+gauss_legendre4`` (the full state recovered from the first ``context_len`` observed states by
  least squares on the true flow, then Gauss–Legendre 4 with the true equations: the known-equations
  competitor) and ``parrot`` (the nearest training window's continuation), which do not depend on the seed.

T = 1 is the one-step map of the observation (no memory): what the window adds is the gap between T = 1
and T > 1.

Training: every learned approach the same recipe (``RECIPE``: Levenberg–Marquardt on subsamples of 2048
windows with 512 check windows, float64; an epoch is 10 iterations: for ``delay_mlp`` at T = 4 on the quick
data, Adam at 3e-3 (batch 256) plateaued at a validation error of 0.096 at t = 10, LM reached 0.0027 in 40 CPU
s) until its validation score (the validation trajectories' observed rollout error at t = 10, ``monitor = val_rollout``)
has not improved for ``patience`` epochs (its plateau) or the CPU budget ``budget_seconds`` (process CPU
seconds, which the machine's load does not bend) is spent; ``best.pt`` is the best-scoring epoch. Each run's
``summary.json`` says why it stopped (``stopped``: ``early_stopping`` = plateau reached; ``time_limit`` = the
budget spent first); the table has that column. The coupling of each attention model is measured on held-out
windows (``vpintegrator.testing.attention_coupling``).

Numbers per (system, approach, T): per seed the median over held-out conditions (and its 10–90 % interval),
over seeds the median with a percentile-bootstrap 95 % interval (``bootstrap_ci``); the target of the target
(``TARGET``): the best learned model's median at t = 10 on the coupled oscillator is <= 1e-3 on >= 4 of 5
seeds.

    vp-study partial_observation --out runs/partial_observation --quick      # <= 10 min on 2 cores
    vp-study partial_observation --out runs/partial_observation              # the default size (hours)

Writes ``OUT/partial_observation.json`` (every per-seed number; rows of the same (system, seed, label) are
replaced, others kept) and ``OUT/partial_observation.md`` (the tables); ``--table-only`` rebuilds the tables
from the JSON. Finished training runs (``complete.json``) are reused: run the same command again to resume.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..config import key
from ..errors import VPIntegratorError
from .options import Study, StudyOptions, comma_list, number_list
from .runner import StudyError, check_out_dir
from .stats import bootstrap_ci, fmt_num, md_table, median_interval, read_json, unplain, write_json, write_text

__all__ = ["H", "HORIZONS", "SYSTEMS", "APPROACHES", "TARGET", "QUICK", "DEFAULTS", "make_data", "train_run",
           "evaluate_seed", "summarize_rows", "tables", "merge_rows", "PartialObservationOptions", "STUDY", "run"]

#: the data step
H = 0.2
#: the horizons of the tables
HORIZONS = (10.0, 100.0)
#: study system -> its vp-gen spec, the observation, the estimation rows' context length
SYSTEMS: dict[str, dict[str, Any]] = {
    "coupled_oscillator": {"spec": "coupled_oscillator_box", "observe": "q", "context_len": 3},
    "rigid_body": {"spec": "rigid_body", "observe": "z1,z2", "context_len": 3},
}
#: learned approach -> its [model] table (seq_len added per T)
APPROACHES: dict[str, dict[str, Any]] = {
    "vpt": {"name": "vpt", "n_blocks": 4, "L": 4},
    "st": {"name": "st"},
    "delay_mlp": {"name": "delay_mlp", "width": 32, "depth": 2},
    "delay_vpff": {"name": "delay_vpff", "n_blocks": 4},
}
#: the seed of the held-out initial conditions (the training file's sampler, another stream)
HELDOUT_SEED = 7919
#: the rows that are not trained (the same for every seed)
FIXED_ROWS = ("estimate+gauss_legendre4", "parrot")
#: the target
TARGET: dict[str, Any] = {"system": "coupled_oscillator", "t": 10.0, "error": 1e-3, "seeds_needed": 4, "of": 5}
#: the recipe every learned approach gets
RECIPE: dict[str, Any] = {"optimizer": "lm", "lm_windows": 2048, "lm_check_windows": 512, "lm_iters_per_epoch": 10,
                          "lm_resample_every": 10, "lm_lambda": 1e-3, "batch_size": 16384, "dtype": "float64",
                          "monitor": "val_rollout", "val_rollout_steps": 50, "val_rollout_error": "final",
                          "val_fraction": 0.15, "test_fraction": 0.0, "epochs": 100000}
DEFAULTS: dict[str, Any] = {"n_train": 200, "n_test": 100, "t_train": 20.0, "windows": [1, 2, 4, 8],
                            "budget_seconds": 60.0, "patience": 20, "approaches": list(APPROACHES),
                            "seeds": [0, 1, 2, 3, 4]}
QUICK: dict[str, Any] = {"n_train": 60, "n_test": 30, "t_train": 20.0, "windows": [1, 4], "budget_seconds": 10.0,
                         "patience": 5, "approaches": ["vpt", "delay_mlp", "delay_vpff"], "seeds": [0, 1]}


# --------------------------------------------------------------------------- data


def make_data(out: Path, system: str, n_train: int, t_train: float) -> Path:
    """The training file of ``system`` (seed 0, ``n_train`` trajectories to ``t_train``), written once under
    ``OUT/data``. The held-out conditions are drawn by the rollout from the file's own sampler with another seed
    (``vp-rollout --heldout``, ``HELDOUT_SEED``) and integrated by the exact flow to t = 100."""
    from ..data import generate, load_spec

    folder = out / "data"
    folder.mkdir(parents=True, exist_ok=True)
    train = folder / f"{system}_train_n{n_train}_t{t_train:g}.h5"
    if not train.is_file():
        generate(load_spec(SYSTEMS[system]["spec"], n_traj=n_train, t_end=t_train, dt=H, seed=0), out=train)
    return train


# --------------------------------------------------------------------------- training


def _run_dir(out: Path, system: str, approach: str, T: int, seed: int) -> Path:
    return out / "runs" / system / f"{approach}_T{T}_seed{seed}"


def train_run(out: Path, train: Path, system: str, approach: str, T: int, seed: int, budget: float,
              patience: int, overwrite: bool = False) -> Path:
    """Train ``approach`` with window ``T`` and ``seed`` on the observed channels of ``train`` (the recipe of
    the module docstring), unless its run directory is complete already; returns the run directory."""
    from ..training import fit

    run = _run_dir(out, system, approach, T, seed)
    if (run / "complete.json").is_file() and not overwrite:
        return run
    fit({**RECIPE, "data": [str(train)], "model": {**APPROACHES[approach], "seq_len": int(T)},
         "observe": SYSTEMS[system]["observe"], "seed": int(seed), "cpu_time_limit": float(budget),
         "time_limit": 20.0 * float(budget) + 60.0, "patience": int(patience), "out": str(run)},
        overwrite=run.exists())
    return run


# --------------------------------------------------------------------------- evaluation


def _errors(y: np.ndarray, ref: np.ndarray, steps: Sequence[int]) -> dict[int, list[float]]:
    """Relative errors per held-out condition at each step of ``steps`` (inf where a rollout failed)."""
    out = {}
    for k in steps:
        num = np.linalg.norm(y[:, k] - ref[:, k], axis=-1)
        den = np.linalg.norm(ref[:, k], axis=-1)
        e = num / den
        out[k] = [float(v) if np.isfinite(v) else math.inf for v in e]
    return out


def evaluate_seed(out: Path, train: Path, n_test: int, system: str, seed: int, runs: dict[tuple[str, int], Path],
                  with_fixed: bool) -> list[dict[str, Any]]:
    """Roll out every trained run of one seed (and its VPT ablations; the fixed rows when ``with_fixed``) from
    ``n_test`` held-out conditions (drawn from ``train``'s sampler, seed ``HELDOUT_SEED``) to t = 100, observed;
    one row per label with the per-condition medians at ``HORIZONS``. The parrot learns from ``train``'s
    training split (the models'), never from a held-out condition."""
    import torch

    from ..data import read_rollout, read_trajectories
    from ..data.observation import observation_from_record
    from ..models import load_model, mean_attention, without_attention
    from ..rollout import RolloutConfig, run_rollouts
    from ..testing import attention_coupling

    info = SYSTEMS[system]
    entries: list[tuple[str, Any]] = []
    meta: dict[str, dict[str, Any]] = {}
    from ..rollout.splits import draw_heldout

    train_data = read_trajectories(train)
    heldout_y0 = draw_heldout(train_data.meta, train_data.system, int(n_test), HELDOUT_SEED, train_data.y[:, 0], train)
    from ..data import solve_flow

    first = solve_flow(train_data.system, heldout_y0, H * np.arange(9))  # type: ignore[arg-type]  # held-out windows
    for (approach, T), run in sorted(runs.items()):
        model = load_model(run).double()
        obs = observation_from_record(getattr(model, "trained_on")["observation"])
        assert obs is not None
        windows = torch.as_tensor(obs.apply(first[:, :T]))
        summary = read_json(run / "summary.json") or {}
        base = {"approach": approach, "T": int(T), "n_params": summary.get("n_params"),
                "train_cpu": summary.get("cpu_time"), "epochs": summary.get("epochs"),
                "best_epoch": summary.get("best_epoch"), "stopped": summary.get("stopped"),
                "best_val": summary.get("best_loss"), "run": str(run.relative_to(out))}
        label = f"{approach}_T{T}"
        coupling = None
        if approach in ("vpt", "st") and T > 1:
            coupling = float(attention_coupling(model, windows).median)
        entries.append((label, model))
        meta[label] = {**base, "kind": "model", "coupling": coupling}
        if approach == "vpt" and T > 1:
            ref_windows = torch.as_tensor(obs.apply(train_data.y[:, :T]))
            entries.append((f"{label}+noattn", without_attention(model)))
            entries.append((f"{label}+meanattn", mean_attention(model, ref_windows)))
            meta[f"{label}+noattn"] = {**base, "approach": "vpt+noattn", "kind": "ablation"}
            meta[f"{label}+meanattn"] = {**base, "approach": "vpt+meanattn", "kind": "ablation"}
    integrators = list(FIXED_ROWS) if with_fixed else []
    for name in integrators:
        meta[name] = {"approach": name, "T": int(info["context_len"]), "kind": "known" if "estimate" in name else
                      "fitted"}
    path = out / "rollouts" / f"{system}_seed{seed}.h5"
    path.parent.mkdir(parents=True, exist_ok=True)
    run_rollouts(RolloutConfig(data=str(train), out=str(path), models=entries, integrators=integrators,
                               observe=info["observe"], t_end=max(HORIZONS), heldout=int(n_test),
                               heldout_seed=HELDOUT_SEED, context_len=int(info["context_len"]),
                               volume=False, workers=1, device="cpu"), overwrite=True)
    ro = read_rollout(path)
    assert ro.reference is not None  # a run of the exact flow writes its reference
    ref = np.asarray(ro.reference.y)
    steps = [int(round(t / H)) for t in HORIZONS]
    rows = []
    for label, row in meta.items():
        errs = _errors(np.asarray(ro.methods[label].y), ref, steps)
        rows.append({"system": system, "observe": info["observe"], "seed": None if row["kind"] in ("known", "fitted")
                     else int(seed), "label": label, **row,
                     **{f"err_t{t:g}": median_interval(errs[k]) for t, k in zip(HORIZONS, steps)}})
    return rows


# --------------------------------------------------------------------------- the tables


def merge_rows(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``old`` with the rows of the same (system, seed, label) as a new one replaced by it."""
    keyed = {(r["system"], r.get("seed"), r["label"]): r for r in old}
    keyed.update({(r["system"], r.get("seed"), r["label"]): r for r in new})
    return list(keyed.values())


def summarize_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (system, approach, T): the per-seed medians at each horizon, their median over seeds with its
    bootstrap interval, the training's stop reasons and CPU, the coupling."""
    groups: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["system"], r["approach"], int(r["T"])), []).append(r)
    out = []
    for (system, approach, T), rs in sorted(groups.items()):
        rs = sorted(rs, key=lambda r: -1 if r.get("seed") is None else r["seed"])
        entry: dict[str, Any] = {"system": system, "approach": approach, "T": T, "kind": rs[0]["kind"],
                                 "seeds": [r.get("seed") for r in rs]}
        for t in HORIZONS:
            per_seed = [r[f"err_t{t:g}"]["median"] for r in rs]
            finite = [v for v in per_seed if v is not None]
            entry[f"t{t:g}"] = {"per_seed": per_seed,
                                "median": float(np.median(finite)) if finite else None,
                                "ci": list(bootstrap_ci(finite)) if len(finite) > 1 else [None, None]}
        entry["stopped"] = sorted({str(r.get("stopped")) for r in rs if r.get("stopped") is not None})
        cpu = [float(r["train_cpu"]) for r in rs if r.get("train_cpu") is not None]
        entry["train_cpu"] = float(np.median(cpu)) if cpu else None
        coupling = [float(r["coupling"]) for r in rs if r.get("coupling") is not None]
        entry["coupling"] = float(np.median(coupling)) if coupling else None
        out.append(entry)
    return out


def _target(summary: list[dict[str, Any]]) -> str:
    """The verdict of ``TARGET`` from the summary: the best learned approach and T by median, its seeds <= the bound."""
    t = f"t{TARGET['t']:g}"
    learned = [e for e in summary if e["system"] == TARGET["system"] and e["kind"] == "model"
               and e[t]["median"] is not None]
    if not learned:
        return "no learned model on the coupled oscillator in these results"
    best = min(learned, key=lambda e: e[t]["median"])
    seeds = [v for v in best[t]["per_seed"] if v is not None]
    hits = sum(1 for v in seeds if v <= TARGET["error"])
    verdict = "met" if hits >= TARGET["seeds_needed"] and len(seeds) >= TARGET["of"] else "not met"
    return (f"Target (coupled oscillator observed in q, best learned model on windows, median <= {TARGET['error']:g} at "
            f"t = {TARGET['t']:g} on >= {TARGET['seeds_needed']} of {TARGET['of']} seeds): **{verdict}** here: the best "
            f"is {best['approach']} at T = {best['T']}, median {fmt_num(best[t]['median'])}, "
            f"{hits} of {len(seeds)} seeds <= {TARGET['error']:g}.")


def tables(summary: list[dict[str, Any]]) -> str:
    """The Markdown tables: per system, every (approach, T) at each horizon, best first at t = 10."""
    lines = ["# Partial observation: results", "", _target(summary), ""]
    for system in dict.fromkeys(e["system"] for e in summary):
        info = SYSTEMS.get(system, {})
        lines += [f"## {system}, observed in {info.get('observe', '?')}", "",
                  "Relative error on the observed channels against the exact flow, per held-out condition: the median "
                  "over conditions per seed, then the median over seeds [95 % bootstrap interval]; per-seed medians in "
                  "the last columns. `stopped`: why training ended (`early_stopping`: its validation plateau; "
                  "`time_limit`: the CPU budget first).", ""]
        rows = [e for e in summary if e["system"] == system]
        rows.sort(key=lambda e: math.inf if e["t10"]["median"] is None else e["t10"]["median"])
        head = ["approach", "T", "kind", "t = 10", "t = 100", "per seed, t = 10", "per seed, t = 100", "coupling",
                "train CPU s", "stopped"]
        body = []
        for e in rows:
            def cell(t: str) -> str:
                m, (lo, hi) = e[t]["median"], e[t]["ci"]
                return fmt_num(m) + (f" [{fmt_num(lo)}, {fmt_num(hi)}]" if lo is not None and hi is not None and
                                     not (isinstance(lo, float) and math.isnan(lo)) else "")

            body.append([e["approach"], e["T"], e["kind"], cell("t10"), cell("t100"),
                         " ".join(fmt_num(v) for v in e["t10"]["per_seed"]),
                         " ".join(fmt_num(v) for v in e["t100"]["per_seed"]),
                         fmt_num(e["coupling"]), fmt_num(e["train_cpu"]), ", ".join(e["stopped"]) or "—"])
        lines += md_table(head, body) + [""]
    return "\n".join(lines)


# --------------------------------------------------------------------------- the command


def _names_of(name: str, valid: Sequence[str]) -> Any:
    """The check of the comma-list key ``name`` whose items are out of ``valid``."""
    def check(value: Any) -> list[str]:
        names = [n.strip() for n in comma_list(value, name).split(",") if n.strip()]
        if not names or any(n not in valid for n in names):
            raise VPIntegratorError(f"{name} must be a comma list out of {', '.join(valid)}; got {value!r}", key=name)
        return names

    return check


@dataclass
class PartialObservationOptions(StudyOptions):
    """The partial-observation study's keys (besides the shared ones of ``StudyOptions``).

    Parameters
    ----------
    quick : bool
        A small run (seeds 0,1; T in 1,4; vpt, delay_mlp, delay_vpff; 60 training and 30 held-out trajectories;
        10 CPU s per training run): the same code path in under ten minutes.
    systems : list of str
        Comma list out of coupled_oscillator, rigid_body (default both).
    windows : list of int
        The window lengths T (default 1,2,4,8).
    approaches : list of str
        Comma list out of vpt, st, delay_mlp, delay_vpff (default all).
    n_train : int
        Training trajectories per system (to t_train; default 200).
    n_test : int
        Held-out initial conditions per system (default 100).
    t_train : float
        The training trajectories' horizon (default 20).
    budget_seconds : float
        Process CPU seconds of every training run, the cap on its way to the plateau (default 60).
    patience : int
        Epochs (of 10 Levenberg–Marquardt iterations) without a better validation score that count as the plateau
        (default 20).
    """

    quick: bool = key(False, type=bool)
    systems: list[str] | None = key(None, optional=True, check=_names_of("systems", list(SYSTEMS)), metavar="LIST")
    windows: list[int] | None = key(None, optional=True, metavar="LIST",
                                    check=number_list(int, "windows", 1, "window lengths >= 1"))
    approaches: list[str] | None = key(None, optional=True, check=_names_of("approaches", list(APPROACHES)),
                                       metavar="LIST")
    n_train: int | None = key(None, optional=True, type=int, low=5)
    n_test: int | None = key(None, optional=True, type=int, low=1)
    t_train: float | None = key(None, optional=True, type=float, low=1.0)
    budget_seconds: float | None = key(None, optional=True, type=float, low=0.5)
    patience: int | None = key(None, optional=True, type=int, low=1)  # type: ignore[assignment]


def _run(a: argparse.Namespace) -> int:
    out = Path(a.out)
    check_out_dir(out)
    path = out / "partial_observation.json"
    if a.export_pretrained is not None:
        raise StudyError("--export-pretrained: the partial_observation study ships no pretrained model (its runs are "
                         "under OUT/runs)")
    if a.table_only:
        data = read_json(path)
        if data is None or "rows" not in data:
            raise StudyError(f"--table-only: {path} not found (or not this study's JSON); give the --out of an earlier "
                             "partial_observation study")
        rows = unplain(data["rows"])
    else:
        size = QUICK if a.quick else DEFAULTS

        def pick(name: str) -> Any:
            return getattr(a, name) if getattr(a, name, None) is not None else size[name]

        seeds = a.seeds or size["seeds"]
        systems = a.systems or list(SYSTEMS)
        windows, approaches = pick("windows"), pick("approaches")
        n_runs = len(systems) * len(seeds) * len(windows) * len(approaches)
        print(f"partial_observation: {n_runs} training runs (systems {', '.join(systems)}; T {windows}; "
              f"{', '.join(approaches)}; seeds {seeds}) of at most {pick('budget_seconds'):g} CPU s each", flush=True)
        out.mkdir(parents=True, exist_ok=True)
        previous = unplain(read_json(path) or {})
        command = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        rows = previous.get("rows", [])
        import torch

        torch.set_num_threads(1)
        for system in systems:
            train = make_data(out, system, int(pick("n_train")), float(pick("t_train")))
            for i, seed in enumerate(seeds):
                runs = {}
                for approach in approaches:
                    for T in windows:
                        runs[(approach, int(T))] = train_run(out, train, system, approach, int(T), int(seed),
                                                             float(pick("budget_seconds")), int(pick("patience")),
                                                             overwrite=bool(a.overwrite))
                new = evaluate_seed(out, train, int(pick("n_test")), system, int(seed), runs, with_fixed=(i == 0))
                rows = merge_rows(rows, new)
                write_json(path, {"commands": [*previous.get("commands", []), command], "rows": rows})
                print(f"partial_observation: {system} seed {seed} done", flush=True)
    summary = summarize_rows(rows)
    text = tables(summary)
    write_text(out / "partial_observation.md", text)
    print(text)
    return 0


def namespace(options: PartialObservationOptions, argv: tuple[str, ...] = ()) -> argparse.Namespace:
    """The study's checked options as the namespace ``run`` reads (an adapter until the study has a plan)."""
    return argparse.Namespace(**{f.name: getattr(options, f.name) for f in dataclasses.fields(options)}, argv=argv)


def run(a: argparse.Namespace) -> int:
    """The study from its resolved options (``STUDY``); bad input is a one-line ``StudyError``."""
    try:
        return _run(a)
    except VPIntegratorError as err:
        raise StudyError(str(err)) from None


#: the study as the runner runs it (``vp-study partial_observation``, ``python -m vpintegrator.studies.partial_observation``)
STUDY = Study(PartialObservationOptions, run, namespace, doc=__doc__, required=("out",), prog="vp-study partial_observation",
              error_prefix="partial_observation study: error: ",
              interrupted="partial_observation study: interrupted; run the same command again (finished training "
                          "runs, those with a complete.json, are kept)")


if __name__ == "__main__":
    from .driver import main as _main

    raise SystemExit(_main(STUDY))
