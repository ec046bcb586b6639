"""The context study's ``--export``: the best validation seed of a family's context model shipped with its
provenance (how it was trained, on what data, its held-out error)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import VPIntegratorError
from ...rundir import is_complete
from ..stats import median_interval, write_json
from .design import COMMON, SETUPS, TARGET
from .evaluation import data_system
from .tables import read_study_json


#: per system: the learned row ``--export`` ships and the name it is shipped under (``pretrained:<name>``)
SHIPPED = {"rigid_body": ("lpnet_ctx", "rigid_body_family_lpnet"),
           "coupled_oscillator": ("g_sympnet_ctx", "coupled_oscillator_family_g_sympnet_ctx")}


def _shipped_system(out: Path, split: str) -> str:
    """The system whose shipped row has finished runs under ``out/runs`` (``--export`` without ``--data``)."""
    found = [s for s, (model, _) in SHIPPED.items()
             if any(is_complete(d) for d in (out / "runs").glob(f"{model}_k{SETUPS[s]['k']}_{split}_seed*"))]
    if len(found) != 1:
        what = "no finished run of " + " or ".join(m for m, _ in SHIPPED.values()) if not found else \
            "runs of both families"
        raise VPIntegratorError(f"--export: {what} in {out / 'runs'}; give the --out of a context study (and --data "
                                "to pick the family when it holds both)", key="export")
    return found[0]


def _shown(path: Path | None, placeholder: str) -> str:
    """``path`` as a shipped record may show it: relative as given, else (absolute, or none) ``placeholder``."""
    return placeholder if path is None or Path(path).is_absolute() else Path(path).as_posix()


def _data_facts(data: Path | None) -> dict[str, Any] | None:
    """What ``pretrained_info(name)["data"]`` says of the training file: its spec, the ``vp-gen`` command that
    makes it again (from the file's own attributes: spec, dt, t_end, n_traj) and its description."""
    if data is None:
        return None
    import h5py

    with h5py.File(data, "r") as f:
        spec, dt, t_end, n = (str(f.attrs["spec"]), float(f.attrs["dt"]), float(f.attrs["t_end"]),
                              int(f.attrs["n_traj"]))
        description = str(f.attrs.get("description", ""))
    return {"spec": spec, "overrides": {"dt": dt, "t_end": t_end, "n_traj": n},
            "command": f"vp-gen {spec} --dt {dt:g} --t-end {t_end:g} --n-traj {n} --out {_shown(data, 'DATA.h5')}",
            "description": description}


def _seed_metric(out: Path, system: str, model: str, split: str, k: int, seed: int) -> float | None:
    """The shipped seed's median relative error at t = 10 over its held-out pairs (σ = 0), from the study's
    ``context_study.json`` (None before the study evaluated it)."""
    path = out / "context_study.json"
    if not path.is_file():
        return None
    for r in read_study_json(path)["rows"]:
        if (r.get("system", "rigid_body"), r["split"], int(r["context_len"]), float(r["noise"]), int(r["seed"]),
                r["method"]) == (system, split, k, 0.0, seed, model):
            return median_interval(r["errors"][f"{TARGET[0]:g}"])["median"]
    return None


def export_best(out: Path, out_dir: Path, name: str | None = None, split: str = "interpolation",
                k: int | None = None, system: str | None = None, data: Path | None = None) -> dict[str, Any]:
    """Ship the seed of the system's shipped row (``SHIPPED``: ``lpnet_ctx`` for the rigid body,
    ``g_sympnet_ctx`` for the coupled oscillator) in ``OUT/runs`` with the lowest validation score
    (``summary.json`` ``best_loss``: validation data only) as ``out_dir/<name>.pt``; its entry merged into
    ``out_dir/provenance.json`` (paths relative to ``out``): the selection, how it was trained (``recipe``, the
    split and, with ``data``, the ``vp-gen`` command of the training file) and its median error at t = 10 on
    its seed's held-out pairs (``metrics``, when ``OUT/context_study.json`` has it). ``system`` None: the one
    whose runs ``out`` holds (or ``data``'s)."""
    import json
    import math
    import shutil

    from ..._io import atomic_path
    from ...provenance import provenance_record
    from ..stats import read_json

    if system is None:
        system = data_system(data)[0] if data is not None else _shipped_system(out, split)
    model, default_name = SHIPPED[system]
    name = name or default_name
    k = SETUPS[system]["k"] if k is None else k
    scores, summaries = {}, {}
    for d in sorted((out / "runs").glob(f"{model}_k{k}_{split}_seed*")):
        summary = read_json(d / "summary.json")
        if d.is_dir() and summary is not None and is_complete(d) and (d / "best.pt").exists() \
                and math.isfinite(summary["best_loss"]):
            seed = int(d.name.rsplit("seed", 1)[1])
            scores[seed], summaries[seed] = float(summary["best_loss"]), summary
    if not scores:
        raise VPIntegratorError(f"--export: no finished {model} run in {out / 'runs'}", key="export")
    seed = min(scores, key=scores.__getitem__)
    source = out / "runs" / f"{model}_k{k}_{split}_seed{seed}" / "best.pt"
    summary = summaries[seed]
    sets = {**COMMON, **SETUPS[system]["sets"].get(model, {})}
    epochs = summary.get("epochs")
    info: dict[str, Any] = {
        "file": f"{name}.pt", "study": "python -m vpintegrator.studies.context --out RUN --export DIR",
        "source": str(source.relative_to(out)), "seed": seed, "monitor": summary.get("monitor"),
        "best_val": scores[seed], "val_by_seed": {str(s): v for s, v in sorted(scores.items())},
        "best_epoch": summary.get("best_epoch"), "train_loss_last": summary.get("train_loss"),
        "wall_time": summary.get("wall_time"), "n_params": summary.get("n_params"),
        "split_by": summary.get("split_by"),
        "phases": f"LM (float64) on a {system}_family file, split parameters_{split}, vp-train settings "
                  f"{json.dumps(sets)}, context_len {k}"}
    split_by = summary.get("split_by") or {}
    info["trained_on"] = {
        "data": _data_facts(data),
        "parametric": True,
        "split": {"seed": seed, "val_fraction": split_by.get("val_fraction"),
                  "test_fraction": split_by.get("test_fraction"), "split_by": f"parameters_{split}"},
        "recorded": "by the context study's export (the .pt file carries dt, system and split as vp-train wrote them)",
    }
    info["recipe"] = {
        "config": f"python -m vpintegrator.studies.context ({model}, LM float64, {epochs} epochs, "
                  f"lm_windows {COMMON['lm_windows']})",
        "command": f"python -m vpintegrator.studies.context --data {_shown(data, 'DATA')} --out {_shown(out, 'RUN')} "
                   f"--seeds {','.join(map(str, sorted(scores)))} "
                   f"--epochs {epochs} --models {model} --context-lens {k} --splits {split}"}
    metric = _seed_metric(out, system, model, split, k, seed)
    if metric is not None:
        info["metrics"] = {
            "protocol": f"100 held-out (initial condition, parameters) pairs inside seed {seed}'s held-out "
                        f"parameter region ({split}), prefix of {k} exact states, against the exact flow (DOP853, "
                        "1e-12)",
            "rel_error_t10_median": metric,
            "command": info["recipe"]["command"],
            "source": "context_study.json of the study (vp-study context)"}
    out_dir.mkdir(parents=True, exist_ok=True)
    with atomic_path(out_dir / info["file"]) as tmp:
        shutil.copyfile(source, tmp)
    info["provenance"] = provenance_record([source], relative_to=out)
    previous = read_json(out_dir / "provenance.json") or {}
    models = {m: v for m, v in (previous.get("models") or {}).items() if m != name}
    write_json(out_dir / "provenance.json", {"rule": previous.get("rule"), "models": {**models, name: info}})
    return info
