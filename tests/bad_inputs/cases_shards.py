"""Bad inputs to vp-gen's and vp-rollout's --workers / --shard and to reading shards (issue 23).

``shard-*``: the vp-gen CLI; ``rshard-*``: the vp-rollout CLI; ``shards-*``: the readers (``api=lambda ws:
...``), on shards of a tiny data set or rollout written under ``ws.out`` (not hashed).
"""

import os
import shutil
from pathlib import Path

from bad_inputs import Case

GEN = "vp-gen"
OUT = ["--out", "{out}/x.h5"]
_TINY = dict(n_traj=40, t_end=0.4, chunk_size=10)


def _shards(ws, name="data", seed=None, count=2, which=None):
    """Shards of a tiny rigid-body data set under ws.out (``which``: only these, no index)."""
    from vpintegrator.data import generate, load_spec

    spec = load_spec("rigid_body", **_TINY, **({} if seed is None else {"seed": seed}))
    out = Path(ws.out) / f"{name}.h5"
    for i in which or range(1, count + 1):
        generate(spec, out, shard=(i, count), workers=1, write_index=which is None)
    return out


def _read(paths):
    from vpintegrator.data import read_trajectories

    return read_trajectories(paths)


def _missing(ws):
    out = _shards(ws)
    os.remove(Path(ws.out) / "data.shard-2-of-2.h5")
    return _read(out)


def _foreign(ws):
    _shards(ws)
    _shards(ws, "other", seed=7, which=[2])
    return _read([Path(ws.out) / "data.shard-1-of-2.h5", Path(ws.out) / "other.shard-2-of-2.h5"])


def _other_count(ws):
    _shards(ws)
    _shards(ws, "three", count=3, which=[2])
    return _read([Path(ws.out) / "data.shard-1-of-2.h5", Path(ws.out) / "three.shard-2-of-3.h5"])


def _twice(ws):
    _shards(ws)
    return _read([Path(ws.out) / "data.shard-1-of-2.h5"] * 2)


def _renamed(ws):
    """A shard of another data set copied over one of ours: the index finds a foreign file."""
    _shards(ws)
    _shards(ws, "other", seed=7, which=[2])
    shutil.copy(Path(ws.out) / "other.shard-2-of-2.h5", Path(ws.out) / "data.shard-2-of-2.h5")
    return _read(Path(ws.out) / "data.h5")


def _index_of_missing(ws):
    from vpintegrator.data.shards import write_shard_index

    _shards(ws, which=[1])
    return write_shard_index(Path(ws.out) / "data.h5", 2)


ROLL = "vp-rollout"
ROLL_BASE = ["--data", "{data}", "--integrators", "rk4", "--n-traj", "4", "--quiet", "--out", "{out}/r.h5"]


def _rollout_shards(ws, name="r", count=2, which=None, **kw):
    """Shards of a rollout of the first 4 trajectories of ws.data under ws.out (``which``: only these)."""
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    out = Path(ws.out) / f"{name}.h5"
    config = RolloutConfig(data=str(ws.data), out=str(out), integrators=["rk4"], n_traj=4, workers=1, **kw)
    for i in which or range(1, count + 1):
        run_rollouts(config, shard=(i, count), write_index=which is None)
    return out


def _read_rollout(paths):
    from vpintegrator.data.rollouts import read_rollout

    return read_rollout(paths)


def _rollout_missing(ws):
    out = _rollout_shards(ws)
    os.remove(Path(ws.out) / "r.shard-2-of-2.h5")
    return _read_rollout(out)


def _rollout_foreign(ws):
    _rollout_shards(ws, which=[1])
    _rollout_shards(ws, "other", which=[2], blowup=10.0)
    return _read_rollout([Path(ws.out) / "r.shard-1-of-2.h5", Path(ws.out) / "other.shard-2-of-2.h5"])


def _rollout_with_data_shard(ws):
    _rollout_shards(ws, which=[1])
    data = _shards(ws, which=[2])
    return _read_rollout([Path(ws.out) / "r.shard-1-of-2.h5", data.with_name("data.shard-2-of-2.h5")])


CASES = [
    Case("shard-zero", GEN, ["{spec}", "--shard", "0/4", *OUT], r"--shard 0/4 is out of range; give shard as I/N"),
    Case("shard-beyond", GEN, ["{spec}", "--shard", "5/4", *OUT], r"--shard 5/4 is out of range"),
    Case("shard-not-i-over-n", GEN, ["{spec}", "--shard", "2of4", *OUT], r"--shard must be I/N; got '2of4'"),
    Case("shard-n-zero", GEN, ["{spec}", "--shard", "1/0", *OUT], r"--shard 1/0 is out of range"),
    Case("shard-more-than-chunks", GEN, ["{spec}", "--shard", "2/3", *OUT],
         r"--shard 2/3: 4 trajectories make only 1 chunk.*give at most 1 shards"),
    Case("shard-workers-zero", GEN, ["{spec}", "--workers", "0", *OUT], r"--workers must be an integer >= 1 .*; got 0"),
    Case("shard-workers-negative", GEN, ["{spec}", "--workers", "-2", *OUT], r"--workers must be an integer >= 1"),
    Case("shard-workers-text", GEN, ["{spec}", "--workers", "all", *OUT], r"'all' is not a valid integer", exit_code=2),
    Case("shard-shards-without-scheduler", GEN, ["{spec}", "--shards", "3", *OUT], r"--shards goes with --dask-scheduler",
         exit_code=2),
    Case("shards-missing", api=_missing, match=r"data\.h5: shard file .*data\.shard-2-of-2\.h5 is missing"),
    Case("shards-foreign", api=_foreign, match=r"other\.shard-2-of-2\.h5: belongs to another data set \(attribute 'seed'"),
    Case("shards-other-count", api=_other_count,
         match=r"three\.shard-2-of-3\.h5: belongs to another data set \(attribute 'shard_count' is 3"),
    Case("shards-twice", api=_twice, match=r"data\.shard-1-of-2\.h5: shard 1/2 given twice"),
    Case("shards-foreign-behind-index", api=_renamed,
         match=r"data\.shard-2-of-2\.h5: belongs to another data set \(attribute 'seed'"),
    Case("shards-index-of-incomplete", api=_index_of_missing, match=r"shard file .*data\.shard-2-of-2\.h5 is missing"),
    Case("shards-not-a-shard", api=lambda ws: _read([_shards(ws).with_name("data.shard-1-of-2.h5"), ws.data]),
         match=r"data\.h5: not a shard"),
    Case("rshard-zero", ROLL, [*ROLL_BASE, "--shard", "0/2"], r"--shard 0/2 is out of range; give shard as I/N"),
    Case("rshard-not-i-over-n", ROLL, [*ROLL_BASE, "--shard", "1-2"], r"--shard must be I/N; got '1-2'"),
    Case("rshard-more-than-trajectories", ROLL, [*ROLL_BASE, "--shard", "1/5"],
         r"--shard 1/5: the run selects only 4 trajectories.*give at most 4 shards"),
    Case("rshard-workers-zero", ROLL, [*ROLL_BASE, "--workers", "0"], r"--workers must be an integer >= 1"),
    Case("rshard-workers-text", ROLL, [*ROLL_BASE, "--workers", "all"], r"'all' is not a valid integer", exit_code=2),
    Case("rshard-shards-without-scheduler", ROLL, [*ROLL_BASE, "--shards", "3"], r"--shards goes with --dask-scheduler",
         exit_code=2),
    Case("rshard-shard-and-work-precision", ROLL, [*ROLL_BASE, "--shard", "1/2", "--work-precision"],
         r"--work-precision goes with a whole run", exit_code=2),
    Case("shards-rollout-missing", api=_rollout_missing, match=r"r\.h5: shard file .*r\.shard-2-of-2\.h5 is missing"),
    Case("shards-rollout-foreign", api=_rollout_foreign,
         match=r"other\.shard-2-of-2\.h5: belongs to another .*attribute 'blowup'"),
    Case("shards-rollout-with-data-shard", api=_rollout_with_data_shard,
         match=r"data\.shard-2-of-2\.h5: not a rollout file"),
]
