"""How many files a parameter's walk through ``fit``, ``run_rollouts`` and ``generate`` visits, in one or two trees.

    python scripts/walk_files.py [--base /path/to/checkout-of-the-old-commit] [--list] [--work DIR]
    python scripts/walk_files.py --study reduction --study partial_observation [--base ...] [--list]

For this checkout (and, with ``--base``, an older one), in a fresh process (``PYTHONPATH`` set to the
tree, one torch thread), it generates a tiny data file (rigid body, implicit midpoint, 16 trajectories to
t = 2, outside the profile), then runs each entry point twice: once to import and compile everything, then again under ``sys.setprofile`` (and
``threading.setprofile``, for worker threads). Only the second run is counted, so the numbers are the
walk, not the imports. The entry points:

- ``fit``: 1 epoch of a float64 VPT with Adam (batch 256, validation fraction 0.1, a run directory);
- ``run_rollouts``: that VPT beside RK4 and implicit midpoint, trajectories 0 and 1 to t = 2;
- ``generate``: the shipped spec ``rigid_body`` (its own method), 4 trajectories to t = 2, into a file.

With ``--study NAME`` (repeatable) the entry points are studies instead: ``vp-study NAME`` at its tiny plan
(``STUDY_ARGS``: the docs-commands test's tiny sizes, one seed, ``--jobs 1``), run through the study driver
(``vpintegrator.studies.driver.main``: parse, plan, run, tables) twice, into two fresh ``--out`` directories, the
second profiled. With ``--jobs 1`` a study's trainings run in the profiled process and no worker subprocess is
started: every file of the walk is counted, in the main process (worker subprocesses, were there any, would not be).

Counted, per entry point and tree:

files
    The distinct ``vpintegrator/**.py`` files in which a Python function ran (a profile ``call`` event
    whose code lives in the tree's package; C functions and other packages are not files of the walk).
climbs
    The distinct (caller file, callee file) pairs, caller != callee, of calls that climb. The caller of
    a call is the nearest frame below it, on the stack, whose code is in the package (a call from the
    package into torch and from torch back into the package, e.g. a module's ``forward``, has the
    package frame before torch as its caller). A call climbs when

    (a) *up a layer*: the callee's part (the first folder below ``vpintegrator/``, or the root
        module's name) sits higher in ``LAYERS`` (the layer list of ``tests/test_layout.py`` as of
        this script; the same list for both trees) than the caller's part; or
    (b) *back up the chain*: the callee's file is already on the stack below the caller's frame, left
        earlier by a call out of it (a callback into a file the walk has left).

    Calls within one file never climb. Each pair is counted once, however often it is made.

Then the first ``EVENTS`` (400) calls of each walk are followed in order (for ``run_rollouts``: the plan
being made): ``stays`` (runs of consecutive calls in one file), ``rooms`` (their distinct files), visits to
``rollout/`` (runs of consecutive calls in that folder), the entries of ``rollout/preflight.py`` and
``rollout/plan.py`` (calls into each from another file, and its stays: a return into the file from a call out of
it and a further call there is a stay too) and the climbing pairs among those calls (and the calls that climb);
``--list`` prints the stays in order. The same counts (stays, visits to ``rollout/``, entries) are printed for
the whole walk too, and for the part of ``run_rollouts``' walk in which its plan is made (``SEGMENT``: from the
first call into ``rollout/plan.py`` to the next into ``rollout/run.py``).

``--list`` prints the files (and the climbing pairs) of each run, ``--functions`` with them the names
of the functions that ran in each file. Exit status 0; the script measures,
it does not judge.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

#: tests/test_layout.py's layers, lowest first, then the root namespace (copied so that both trees are counted by
#: the same list; tests/test_walk_files.py checks the copy against the test's list)
LAYERS = [
    "errors", "plugins", "protocols", "_version", "provenance", "_progress", "_logging", "_lazy", "_toml",
    "_shipped", "_signals", "_jitcache", "_io", "_outputs", "resources", "config", "device", "clock", "quantiles",
    "arrays", "rundir", "fastpath", "stepping", "jobs",
    "systems", "integrators", "compiled", "data",
    "jacobians", "nn", "models", "reduction", "metrics", "poisson", "testing",
    "rollout", "training", "plotting", "studies", "cli", "__init__", "__main__",
]

#: the entry points, in the order the program runs them
ENTRIES = ("fit", "run_rollouts", "generate")

#: ``--study NAME``: a study's tiny plan (tests/test_docs_commands.py's ``TINY_STUDY``), all but ``--out``; ``--jobs 1``:
#: its trainings run in the profiled process (no worker subprocess), so every file of the walk is counted
STUDY_ARGS = {
    "partial_observation": ["--quick", "--seeds", "0", "--jobs", "1", "-q", "--systems", "coupled_oscillator",
                            "--approaches", "delay_mlp2", "--windows", "2", "--set", "n_train=6", "--set", "n_test=2",
                            "--set", "budget_seconds=2", "--set", "max_steps=2"],
    "reduction": ["--quick", "--seeds", "0", "--jobs", "1", "-q", "--systems", "toda", "--set", "sizes=8",
                  "--set", "floor_dims=2", "--set", "reduced_dims=2", "--set", "autoencoder_sizes=8",
                  "--set", "ladder=quick", "--set", "train_seconds=1", "--set", "repeats=1",
                  "--set", "autoencoder_steps=5", "--set", "max_steps=2"],
    "compare": ["--quick", "--seeds", "0", "-q", "--problems", "rigid_body", "--set", "n_train=10",
                "--set", "n_test=2", "--set", "max_steps=2", "--set", "n_steps=5"],
}

#: the calls of each walk followed in order (its opening: the plan being made, for ``run_rollouts``)
EVENTS = 400

#: the files whose entries the sequence counts name
ENTERED = ("rollout/preflight.py", "rollout/plan.py")

#: where run_rollouts' plan is made: from the builder's file to the runner's
SEGMENT = ("rollout/plan.py", "rollout/run.py")

PROGRAM = r'''
import json, sys, threading
from pathlib import Path
import torch
torch.set_num_threads(1)
import vpintegrator as vp
from vpintegrator.rollout import RolloutConfig, run_rollouts

LAYERS = json.loads(sys.argv[2])
EVENTS = int(sys.argv[3])
STUDIES = json.loads(sys.argv[4])  # study name -> its arguments but --out; empty: the three entry points
work = Path(sys.argv[1])
work.mkdir(parents=True, exist_ok=True)
root = str(Path(vp.__file__).resolve().parent) + "/"
data = work / "data.h5"


def part(rel):
    head = rel.split("/")[0]
    return head[:-3] if head.endswith(".py") else head


def rank(rel):
    p = part(rel)
    return LAYERS.index(p) if p in LAYERS else len(LAYERS)


def profiled(fn):
    files, climbs = {}, set()
    cache = {}
    events = []  # the first EVENTS calls into the package, in order: (callee file, climb or "", from another file)
    entered = {}  # file -> calls into it from another file (or from outside the package), the whole walk
    stays = []  # the whole walk's stays: the file of each run of consecutive calls in one file
    marks = []  # per stay: (calls into its file from another file, the climbing pairs of its calls)

    def rel(code):
        f = cache.get(code)
        if f is None:
            name = code.co_filename
            f = cache[code] = name[len(root):] if name.startswith(root) and name.endswith(".py") else ""
        return f

    def hook(frame, event, arg):
        if event != "call":
            return
        callee = rel(frame.f_code)
        if not callee:
            return
        files.setdefault(callee, set()).add(frame.f_code.co_name)
        kind, caller = climb(frame, callee)
        if caller != callee:
            entered[callee] = entered.get(callee, 0) + 1
        if len(events) < EVENTS:
            events.append((callee, kind, caller != callee))
        if not stays or stays[-1] != callee:
            stays.append(callee)
            marks.append([0, []])
        marks[-1][0] += caller != callee
        if kind:
            marks[-1][1].append(kind)

    def climb(frame, callee):
        below = frame.f_back
        caller = ""
        while below is not None:  # the nearest package frame: the caller
            caller = rel(below.f_code)
            if caller:
                break
            below = below.f_back
        if not caller or caller == callee:
            return "", caller
        if rank(callee) > rank(caller):
            climbs.add((caller, callee, "layer"))
            return caller + " -> " + callee, caller
        deeper = below.f_back
        while deeper is not None:  # the callee's file already on the stack below the caller
            if rel(deeper.f_code) == callee:
                climbs.add((caller, callee, "chain"))
                return caller + " -> " + callee, caller
            deeper = deeper.f_back
        return "", caller

    threading.setprofile(hook)
    sys.setprofile(hook)
    try:
        fn()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return ({f: sorted(names) for f, names in sorted(files.items())}, sorted(climbs), events, stays, entered,
            marks)


def study(name, args, out):
    from vpintegrator.studies.driver import main

    status = main(name, [*args, "--out", str(work / out)])
    if status != 0:
        raise SystemExit(f"vp-study {name} {' '.join(args)} --out {work / out}: exit status {status}")


if STUDIES:
    result = {}
    for name, args in STUDIES.items():
        study(name, args, name + "0")  # imports and compiles outside the profile
        result[name] = profiled(lambda: study(name, args, name + "1"))
    print("WALK " + json.dumps(result))
    sys.exit(0)
vp.generate(vp.load_spec("rigid_body_paper", method="implicit_midpoint", n_traj=16, t_end=2.0), out=data)


def train(out):
    vp.fit({"data": [str(data)], "model": {"name": "vpt"}, "epochs": 1, "batch_size": 256, "seed": 7,
            "val_fraction": 0.1, "out": str(work / out), "dtype": "float64"})


def roll(out):
    run_rollouts(RolloutConfig(data=str(data), models={"vpt": str(work / "run0")},
                               integrators=["rk4", "implicit_midpoint"], t_end=2.0, traj=[0, 1],
                               out=str(work / out)))


train("run0")  # imports and compiles outside the profile
result = {"fit": profiled(lambda: train("run1"))}
roll("roll0.h5")
result["run_rollouts"] = profiled(lambda: roll("roll1.h5"))


def gen(out):
    vp.generate(vp.load_spec("rigid_body", n_traj=4, t_end=2.0), out=work / out)


gen("gen0.h5")
result["generate"] = profiled(lambda: gen("gen1.h5"))
print("WALK " + json.dumps(result))
'''


def sequence(events: list) -> dict:
    """The walk's first ``EVENTS`` calls followed in order: ``stays`` (runs of consecutive calls in one file),
    ``rooms`` (the distinct files of those calls), ``rollout_visits`` (runs of consecutive calls in
    ``rollout/``), ``stays_in`` (stays in each file of ``ENTERED``), ``entries`` (the calls into each file of
    ``ENTERED`` from another file) and ``climbs`` (distinct climbing pairs among those calls)."""
    files = [e[0] for e in events]
    stays = [f for i, f in enumerate(files) if i == 0 or files[i - 1] != f]
    in_rollout = [f.startswith("rollout/") for f in files]
    visits = sum(1 for i, r in enumerate(in_rollout) if r and (i == 0 or not in_rollout[i - 1]))
    return {"stays": len(stays), "rooms": len(set(files)), "rollout_visits": visits,
            "stays_in": {name: stays.count(name) for name in ENTERED},
            "entries": {name: sum(1 for f, _, new in events if f == name and new) for name in ENTERED},
            "climbs": len({e[1] for e in events if e[1]}), "climbing_calls": sum(1 for e in events if e[1]),
            "stay_list": [(f, sum(1 for _ in group)) for f, group in itertools.groupby(files)]}


def segment(stays: list, marks: list) -> dict:
    """``sequence``'s counts over the stays of ``run_rollouts`` from the first in ``SEGMENT[0]`` (the plan's
    builder) to the next in ``SEGMENT[1]`` (the runner, once the plan stands), that one left out."""
    a = stays.index(SEGMENT[0]) if SEGMENT[0] in stays else len(stays)
    b = next((i for i in range(a, len(stays)) if stays[i] == SEGMENT[1]), len(stays))
    part, m = stays[a:b], marks[a:b]
    in_rollout = [f.startswith("rollout/") for f in part]
    pairs = [k for _, kinds in m for k in kinds]
    return {"stays": len(part), "rooms": len(set(part)),
            "rollout_visits": sum(1 for i, r in enumerate(in_rollout) if r and (i == 0 or not in_rollout[i - 1])),
            "stays_in": {n: part.count(n) for n in ENTERED},
            "entries": {n: sum(e for f, (e, _) in zip(part, m) if f == n) for n in ENTERED},
            "climbs": len(set(pairs)), "climbing_calls": len(pairs)}


def study_args(names: list[str]) -> dict[str, list[str]]:
    """The arguments (all but ``--out``) of the studies ``names`` at their tiny plans (``STUDY_ARGS``), else a
    one-line error naming ``--study``."""
    unknown = [n for n in names if n not in STUDY_ARGS]
    if unknown:
        raise SystemExit(f"--study {unknown[0]}: no tiny plan for it here; valid: {', '.join(STUDY_ARGS)}")
    return {n: STUDY_ARGS[n] for n in dict.fromkeys(names)}


def walk(tree: Path, work: Path, studies: dict[str, list[str]] | None = None) -> dict:
    """``{entry point: (files, climbs, ...)}`` for ``tree``, run in a fresh process; with ``studies`` (name ->
    arguments) the entry points are those studies' commands."""
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": "1"}
    work.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(PROGRAM), str(work), json.dumps(LAYERS), str(EVENTS),
                           json.dumps(studies or {})], env=env, capture_output=True, text=True, cwd=work.parent)
    if proc.returncode != 0:
        raise SystemExit(f"the program failed on {tree}:\n{proc.stderr[-3000:]}")
    line = next(x for x in proc.stdout.splitlines() if x.startswith("WALK "))
    return json.loads(line[5:])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", type=Path, default=None, help="a checkout of an older commit to compare with")
    ap.add_argument("--here", type=Path, default=HERE, help="the tree to compare (default: this checkout)")
    ap.add_argument("--list", action="store_true", help="print the files and climbing pairs")
    ap.add_argument("--functions", action="store_true", help="with --list: the functions that ran in each file")
    ap.add_argument("--work", type=Path, default=None, help="a directory for the runs (default: a temporary one)")
    ap.add_argument("--study", action="append", default=[], metavar="NAME",
                    help=f"walk vp-study NAME at a tiny plan instead of the entry points (repeatable: "
                         f"{', '.join(STUDY_ARGS)})")
    args = ap.parse_args(argv)
    studies = study_args(args.study)
    entries = tuple(studies) or ENTRIES
    with tempfile.TemporaryDirectory() as tmp:
        work = args.work or Path(tmp)
        walks = {"base": walk(args.base.resolve(), work / "base", studies)} if args.base is not None else {}
        walks["here"] = walk(args.here.resolve(), work / "here", studies)
    for name, plan in studies.items():
        print(f"{name}: vp-study {name} {' '.join(plan)} --out DIR (the second of two runs)")
    width = max(14, *(len(e) for e in entries))
    print(f"{'entry point':<{width}} {'tree':<5} {'files':>5} {'climbs':>6} (layer + chain)")
    for entry in entries:
        for tree, found in walks.items():
            files, climbs = found[entry][:2]
            layer = sum(1 for c in climbs if c[2] == "layer")
            print(f"{entry:<{width}} {tree:<5} {len(files):>5} {len(climbs):>6} ({layer} + {len(climbs) - layer})")
    print(f"\nthe first {EVENTS} calls, in order")
    print(f"{'entry point':<{width}} {'tree':<5} {'stays':>5} {'rooms':>5} {'rollout/':>8} "
          + " ".join(f"{Path(n).name:>12}" for n in ENTERED) + f" {'climbs':>6} {'(calls)':>7}"
          + "  (a file's column: calls into it from another file / its stays)")
    for entry in entries:
        for tree, found in walks.items():
            seq = sequence(found[entry][2])
            print(f"{entry:<{width}} {tree:<5} {seq['stays']:>5} {seq['rooms']:>5} {seq['rollout_visits']:>8} "
                  + " ".join(f"{str(seq['entries'][n]) + ' / ' + str(seq['stays_in'][n]):>12}" for n in ENTERED)
                  + f" {seq['climbs']:>6} {seq['climbing_calls']:>7}")
    print("\nthe whole walk, in order")
    print(f"{'entry point':<{width}} {'tree':<5} {'stays':>6} {'rollout/':>8} " + " ".join(f"{Path(n).name:>12}" for n in ENTERED))
    for entry in entries:
        for tree, found in walks.items():
            stays, entered = found[entry][3], found[entry][4]
            in_rollout = [f.startswith("rollout/") for f in stays]
            visits = sum(1 for i, r in enumerate(in_rollout) if r and (i == 0 or not in_rollout[i - 1]))
            print(f"{entry:<{width}} {tree:<5} {len(stays):>6} {visits:>8} "
                  + " ".join(f"{str(entered.get(n, 0)) + ' / ' + str(stays.count(n)):>12}" for n in ENTERED))
    if "run_rollouts" in entries:
        print(f"\nrun_rollouts' plan being made (from the first call into {SEGMENT[0]} to the next into {SEGMENT[1]})")
        print(f"{'tree':<5} {'stays':>5} {'rooms':>5} {'rollout/':>8} " + " ".join(f"{Path(n).name:>12}" for n in ENTERED)
              + f" {'climbs':>6} {'(calls)':>7}")
    for tree, found in walks.items() if "run_rollouts" in entries else ():
        seg = segment(found["run_rollouts"][3], found["run_rollouts"][5])
        print(f"{tree:<5} {seg['stays']:>5} {seg['rooms']:>5} {seg['rollout_visits']:>8} "
              + " ".join(f"{str(seg['entries'][n]) + ' / ' + str(seg['stays_in'][n]):>12}" for n in ENTERED)
              + f" {seg['climbs']:>6} {seg['climbing_calls']:>7}")
    if args.list:
        for entry in entries:
            for tree, found in walks.items():
                files, climbs = found[entry][:2]
                print(f"\n{entry}, {tree}: {len(files)} files")
                for f, names in files.items():
                    print(f"  {f}: {', '.join(names)}" if args.functions else f"  {f}")
                for a, b, kind in climbs:
                    print(f"  climb ({kind}): {a} -> {b}")
                print(f"  the first {EVENTS} calls, stay by stay (file x calls):")
                print("    " + ", ".join(f"{f} x{n}" for f, n in sequence(found[entry][2])["stay_list"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
