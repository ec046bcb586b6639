#!/usr/bin/env python
"""Write into the shipped pretrained files what they were trained on (issue 46): the step, the system and
its parameters, and the trajectory split, so that ``vp-rollout`` step-checks them like a ``vp-train`` run.

The facts are those of ``vpintegrator/pretrained/provenance.json`` (each model's ``trained_on`` entry: the
``vp-gen`` command of its training data, the run's seed and split fractions). For each model this script

1. generates the first states of that data (the spec's initial conditions; ``t_end`` two steps: the split
   and the step do not depend on the horizon),
2. rebuilds the run's split as ``vp-train`` made it then (``split_train_val_test(n_traj, val_fraction,
   test_fraction, seed)``; the models trained before test splits existed have an empty test split),
3. adds ``dt``, ``system``, ``system_params``, ``parametric``, ``split`` and ``split_data`` to the ``.pt``
   file, leaving every other entry (the state_dict above all) as it was, and checks that the split it
   rebuilt equals the one a file already records;
4. mirrors into provenance.json what ``vpintegrator.pretrained_info`` reads without torch: the model's
   config, the step, system and parameters, the split's sizes and ``weights_sha256`` of the state_dict (the
   file's weights before the rewrite: a later rewrite that changed them would fail the tests).

Idempotent; run from the repository root::

    python scripts/record_pretrained.py            # rewrite the files that lack (or differ from) the record
    python scripts/record_pretrained.py --check    # exit 1 if a file does not carry its record
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np
import torch

from vpintegrator.data import generate, load_spec
from vpintegrator.data.trajectories import first_states_digest
from vpintegrator.data.windows import split_train_val_test
from vpintegrator.models.files import PRETRAINED_DIR, weights_sha256
from vpintegrator.systems.registry import system_params_from_meta


def record_for(entry: dict) -> dict:
    """The entries a shipped file gains, from its ``trained_on`` facts in provenance.json."""
    facts = entry["trained_on"]
    data = facts["data"]
    spec = load_spec(data["spec"], **data.get("overrides", {}))
    spec = spec.replace(t_end=2 * spec.dt)
    traj = generate(spec)
    split = facts["split"]
    train, val, test = split_train_val_test(traj.n_traj, split["val_fraction"], split["test_fraction"], split["seed"])
    params = {str(k): (v.tolist() if hasattr(v, "tolist") else v) for k, v in system_params_from_meta(traj.meta).items()}
    return {
        "dt": float(traj.dt),
        "system": str(traj.meta["system"]),
        "system_params": params,
        "parametric": False,
        "split": {"train": train.tolist(), "val": val.tolist(), "test": test.tolist()},
        "split_data": {"n_traj": int(traj.n_traj), "first_states_sha256": first_states_digest(np.asarray(traj.y[:, 0]))},
    }


def mirror(entry: dict, payload: dict) -> None:
    """Write into the provenance.json ``entry`` what the ``.pt`` file ``payload`` records."""
    facts = entry["trained_on"]
    for key in ("dt", "system", "system_params", "parametric"):
        facts[key] = payload.get(key)
    if payload.get("observation") is not None:  # a model of observed channels (pretrained_info()["observation"])
        facts["observation"] = payload["observation"]
    split = payload.get("split") or {}
    facts["split"].update({"n_traj": (payload.get("split_data") or {}).get("n_traj"),
                           **{f"n_{k}": len(split.get(k, [])) for k in ("train", "val", "test")}})
    entry["model"] = dict(payload["config"])
    entry.setdefault("weights_sha256", weights_sha256(payload["state_dict"]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="only check; exit 1 if a file lacks its record")
    args = ap.parse_args(argv)
    prov = json.loads((PRETRAINED_DIR / "provenance.json").read_text(encoding="utf-8"))
    bad = 0
    for name, entry in prov["models"].items():
        if "trained_on" not in entry:
            continue
        path = PRETRAINED_DIR / entry["file"]
        payload = torch.load(path, weights_only=True)
        if entry["trained_on"].get("parametric"):  # its study wrote the record into the file
            mirror(entry, payload)
            continue
        want = record_for(entry)
        for key in ("split", "split_data"):  # a split the file records already must be the one rebuilt
            if key in payload and payload[key] != want[key]:
                raise SystemExit(f"{path.name}: its recorded {key} differs from the one rebuilt from provenance.json")
        if all(payload.get(k) == v for k, v in want.items()):
            print(f"{path.name}: carries its record")
            mirror(entry, payload)
            continue
        if args.check:
            print(f"{path.name}: lacks its record (dt, system, split)")
            bad += 1
            continue
        before = {k: v.clone() for k, v in payload["state_dict"].items()}
        payload.update(want)
        tmp = path.with_suffix(".tmp")
        torch.save(payload, tmp)
        again = torch.load(tmp, weights_only=True)["state_dict"]
        assert all(torch.equal(before[k], again[k]) and before[k].dtype == again[k].dtype for k in before)
        tmp.replace(path)
        mirror(entry, payload)
        print(f"{path.name}: recorded dt {want['dt']:g}, system {want['system']}, split "
              f"{len(want['split']['train'])}/{len(want['split']['val'])}/{len(want['split']['test'])}")
    if not args.check:
        text = json.dumps(prov, indent=2, ensure_ascii=False) + "\n"
        (PRETRAINED_DIR / "provenance.json").write_text(text, encoding="utf-8")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
