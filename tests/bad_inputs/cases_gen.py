"""Bad inputs to vp-gen and the data / generation API (readers, writer, specs, systems, samplers).

``gen-*``: the vp-gen CLI; ``data-*``: the Python API (``api=lambda ws: ...``). Files an API case needs
beyond the workspace's are written under ``ws.out`` (not hashed).
"""

import os
import shutil
import sys
from pathlib import Path

import numpy as np

from bad_inputs import Case

_SPEC = (
    '[system]\nname = "{system}"\n[initial_conditions]\nsampler = "sphere"\nn_traj = 2\n'
    "[integration]\ndt = 0.1\nt_end = 0.5\nmethod = \"rk4\"\n"
)


def _spec_file(ws, text, name="s.toml"):
    p = Path(ws.out) / name
    p.write_text(text)
    return p


def _user_system_spec(ws, system):
    return _spec_file(ws, _SPEC.format(system=system))


def _with_module(ws, name, source, fn):
    """Run ``fn()`` with a module ``name`` (from ``source``) importable from ``ws.out``."""
    (Path(ws.out) / f"{name}.py").write_text(source)
    sys.path.insert(0, ws.out)
    try:
        return fn()
    finally:
        sys.path.remove(ws.out)
        sys.modules.pop(name, None)


def _copy_with(ws, name, change):
    """A copy of data.h5 under ws.out with ``change(f)`` applied (h5py file opened r+)."""
    import h5py

    p = Path(ws.out) / name
    shutil.copy(ws.data, p)
    with h5py.File(p, "r+") as f:
        change(f)
    return p


def _set_t(values):
    def change(f):
        t = f["t"][:]
        for i, v in values.items():
            t[i] = v
        f["t"][...] = t

    return change


def _read(*a, **k):
    from vpintegrator.data import read_trajectories

    return read_trajectories(*a, **k)


def _meta(*a, **k):
    from vpintegrator.data import read_metadata

    return read_metadata(*a, **k)


def _load(*a, **k):
    from vpintegrator.data import load_spec

    return load_spec(*a, **k)


def _gen(*a, **k):
    from vpintegrator.data.generation import generate

    return generate(*a, **k)


def _write(path, traj):
    from vpintegrator.data import write_trajectories

    return write_trajectories(path, traj)


def _traj(y=None, t=None, **k):
    from vpintegrator.data import Trajectories

    y = np.zeros((2, 5, 3)) if y is None else y
    t = np.arange(5) * 0.1 if t is None else t
    return Trajectories(y=y, t=t, **k)


def _system(*a, **k):
    from vpintegrator.systems import get_system

    return get_system(*a, **k)


def _sample(*a, **k):
    from vpintegrator.systems import sample_initial_conditions

    return sample_initial_conditions(*a, **k)


def _spec(**k):
    from vpintegrator.data import GenerationSpec

    args = dict(name="x", system="rigid_body", sampler="sphere", dt=0.1, t_end=1.0, n_traj=2)
    args.update(k)
    return GenerationSpec(**args)


def _memory_limit(ws, nbytes, fn):
    import importlib

    resources = importlib.import_module("vpintegrator.resources")

    old = resources.available_memory
    resources.available_memory = lambda: nbytes
    try:
        return fn()
    finally:
        resources.available_memory = old


def _out(ws, name="x.h5"):
    return str(Path(ws.out) / name)


GEN = "vp-gen"
OUT = ["--out", "{out}/x.h5"]

CASES = [
    # --- the spec argument: files of the wrong kind -------------------------------------------------
    Case("gen-hdf5-as-spec", GEN, ["{data}", *OUT], r"not a TOML text file"),
    Case("gen-rollout-as-spec", GEN, ["{rollout}", *OUT], r"rollout\.h5.*not a TOML text file"),
    Case("gen-checkpoint-as-spec", GEN, ["{model}", *OUT], r"best\.pt.*not a TOML text file"),
    Case("gen-text-as-spec", GEN, ["{text}", *OUT], r"notes\.txt.*malformed TOML"),
    Case("gen-empty-as-spec", GEN, ["{empty}", *OUT], r"empty\.h5.*(empty|missing table \[system\])"),
    Case("gen-dir-as-spec", GEN, ["{dir}", *OUT], r"adir.*is a directory"),
    Case("gen-config-as-spec", GEN, ["{config}", *OUT], r"config\.toml: unknown key 'data'"),
    Case("gen-missing-spec-file", GEN, ["{out}/missing.toml", *OUT], r"missing\.toml.*not found"),
    Case("gen-unknown-spec-name", GEN, ["no_such_spec", *OUT], r"unknown spec 'no_such_spec'; valid specs: .*rigid_body"),
    Case("gen-no-spec", GEN, [], r"missing SPEC", exit_code=2),
    # --- numeric flags: NaN, Inf, zero, negative, absurd ------------------------------------------
    Case("gen-dt-zero", GEN, ["{spec}", "--dt", "0", *OUT], r"--dt must be a finite number > 0"),
    Case("gen-dt-nan", GEN, ["{spec}", "--dt", "nan", *OUT], r"--dt must be a finite number > 0; got nan"),
    Case("gen-dt-inf", GEN, ["{spec}", "--dt", "inf", *OUT], r"--dt must be a finite number > 0; got inf"),
    Case("gen-dt-negative", GEN, ["{spec}", "--dt", "-0.1", *OUT], r"--dt must be a finite number > 0"),
    Case("gen-t-end-inf", GEN, ["{spec}", "--t-end", "inf", *OUT], r"--t-end must be a finite number > 0"),
    Case("gen-t-end-nan", GEN, ["{spec}", "--t-end", "nan", *OUT], r"--t-end must be a finite number > 0"),
    Case("gen-t-end-below-dt", GEN, ["{spec}", "--t-end", "0.01", *OUT], r"t_end \(0\.01\) must be >= dt \(0\.1\)"),
    Case("gen-steps-overflow", GEN, ["{spec}", "--dt", "1e-300", "--t-end", "1e300", *OUT],
         r"(states|steps).*too many|cannot fit|larger --dt"),
    Case("gen-t-end-huge", GEN, ["{spec}", "--t-end", "1e15", *OUT], r"[GTP]iB|too many|larger --dt"),
    Case("gen-dt-tiny-memory", GEN, ["{spec}", "--dt", "1e-9", "--t-end", "10", *OUT],
         r"[GTP]iB.*(memory|disk).*(--dt|--t-end)"),
    Case("gen-n-traj-huge-disk", GEN, ["{spec}", "--n-traj", "100000000", "--t-end", "100", *OUT],
         r"[GTP]iB.*(disk|memory).*--n-traj"),
    Case("gen-n-traj-absurd", GEN, ["{spec}", "--n-traj", "1000000000000000", *OUT], r"[GTP]iB|--n-traj"),
    Case("gen-n-traj-negative", GEN, ["{spec}", "--n-traj", "-1", *OUT], r"--n-traj must be an integer >= 1; got -1"),
    Case("gen-n-traj-zero", GEN, ["{spec}", "--n-traj", "0", *OUT], r"--n-traj must be an integer >= 1"),
    Case("gen-n-traj-float", GEN, ["{spec}", "--n-traj", "1.5", *OUT], r"--n-traj.*not a valid integer", exit_code=2),
    Case("gen-rtol-zero", GEN, ["{spec}", "--rtol", "0", *OUT], r"--rtol must be a finite number > 0"),
    Case("gen-rtol-nan", GEN, ["{spec}", "--rtol", "nan", *OUT], r"--rtol must be a finite number > 0"),
    Case("gen-rtol-absurd", GEN, ["{spec}", "--rtol", "5", *OUT], r"--rtol must be < 1"),
    Case("gen-atol-negative", GEN, ["{spec}", "--atol", "-1e-9", *OUT], r"--atol must be a finite number > 0"),
    Case("gen-atol-inf", GEN, ["{spec}", "--atol", "inf", *OUT], r"--atol must be a finite number > 0"),
    Case("gen-chunk-size-zero", GEN, ["{spec}", "--chunk-size", "0", *OUT], r"--chunk-size must be an integer >= 1"),
    Case("gen-chunk-size-negative", GEN, ["{spec}", "--chunk-size", "-5", *OUT], r"--chunk-size must be an integer >= 1"),
    Case("gen-seed-negative", GEN, ["{spec}", "--seed", "-1", *OUT], r"--seed must be an integer >= 0; got -1"),
    Case("gen-seed-huge", GEN, ["{spec}", "--seed", "99999999999999999999999999", *OUT], r"--seed must be .*< 2\*\*63"),
    Case("gen-unknown-method", GEN, ["{spec}", "--method", "euler9", *OUT], r"unknown method 'euler9'; valid methods: dop853"),
    Case("gen-method-needs-separable", GEN, ["{spec}", "--method", "stormer_verlet", *OUT],
         r"needs a separable Hamiltonian"),
    Case("gen-paper-sphere-too-many", GEN, ["rigid_body_paper", "--n-traj", "5000", *OUT], r"1\.\.1238"),
    Case("gen-list-sampler-n-mismatch", GEN, ["coupled_oscillator", "--n-traj", "3", *OUT], r"got 1 points but n=3"),
    # --- --set ------------------------------------------------------------------------------------
    Case("gen-set-dt-abc", GEN, ["{spec}", "--set", "dt=abc", *OUT], r"dt must be a finite number > 0; got 'abc'"),
    Case("gen-set-dt-list", GEN, ["{spec}", "--set", "dt=[1,2]", *OUT], r"dt must be a finite number > 0"),
    Case("gen-set-n-traj-bool", GEN, ["{spec}", "--set", "n_traj=true", *OUT], r"n.traj must be an integer >= 1"),
    Case("gen-set-seed-float", GEN, ["{spec}", "--set", "integration.seed=1.5", *OUT], r"seed must be an integer"),
    Case("gen-set-method-int", GEN, ["{spec}", "--set", "method=3", *OUT], r"method must be a non-empty string"),
    Case("gen-set-out-empty", GEN, ["{spec}", "--set", 'out=""'], r"out.*must be a file path"),
    Case("gen-set-inertia-short", GEN, ["{spec}", "--set", "system.inertia=[1,2]", *OUT],
         r"inertia.*3 positive numbers.*\[1, 2\]"),
    Case("gen-set-inertia-negative", GEN, ["{spec}", "--set", "system.inertia=[-1,1,1]", *OUT],
         r"inertia' must be a finite number > 0; got -1"),
    Case("gen-set-inertia-inf", GEN, ["{spec}", "--set", "system.inertia=[inf,1,1]", *OUT], r"inertia.*finite"),
    Case("gen-set-inertia-string", GEN, ["{spec}", "--set", "system.inertia=abc", *OUT], r"inertia"),
    Case("gen-set-inertia-nested", GEN, ["{spec}", "--set", "system.inertia=[[1],[2],[3]]", *OUT], r"inertia"),
    Case("gen-set-inertia-table", GEN, ["{spec}", "--set", "system.inertia={{a=1}}", *OUT], r"inertia"),
    Case("gen-set-unknown-param", GEN, ["{spec}", "--set", "system.mass=3", *OUT], r"no parameter\(s\) mass"),
    Case("gen-set-system-name", GEN, ["{spec}", "--set", "system.name=pendulum", *OUT], r"system.name"),
    Case("gen-set-unknown-key", GEN, ["{spec}", "--set", "foo=1", *OUT], r"--set: unknown key 'foo'"),
    Case("gen-set-unknown-integration-key", GEN, ["{spec}", "--set", "integration.foo=1", *OUT],
         r"unknown key 'integration\.foo'"),
    Case("gen-set-not-key-value", GEN, ["{spec}", "--set", "dt", *OUT], r"'dt' is not KEY=VALUE"),
    Case("gen-set-sampler-unknown", GEN, ["{spec}", "--set", "initial_conditions.sampler=nope", *OUT],
         r"unknown sampler 'nope'"),
    Case("gen-set-sampler-n", GEN, ["{spec}", "--set", "initial_conditions.n=4", *OUT],
         r"initial_conditions\.n is not a sampler argument .*initial_conditions\.n_traj"),
    Case("gen-set-sampler-rng", GEN, ["{spec}", "--set", "initial_conditions.rng=4", *OUT],
         r"initial_conditions\.rng is not a sampler argument"),
    Case("gen-set-radius-negative", GEN, ["{spec}", "--set", "initial_conditions.radius=-1", *OUT],
         r"'radius' must be > 0"),
    Case("gen-set-radius-string", GEN, ["{spec}", "--set", "initial_conditions.radius=abc", *OUT], r"radius"),
    Case("gen-set-center-length", GEN, ["{spec}", "--set", "initial_conditions.center=[1,2]", *OUT],
         r"'center' must be a number or 3 numbers"),
    Case("gen-set-sampler-unknown-arg", GEN, ["{spec}", "--set", "initial_conditions.foo=1", *OUT],
         r"unknown arguments \(foo\)"),
    Case("gen-set-points-nan", GEN, ["coupled_oscillator", "--set", "initial_conditions.points=[[nan,0,0,0]]", *OUT],
         r"point 0 is not finite"),
    Case("gen-set-mass-zero", GEN, ["coupled_oscillator", "--set", "system.m=[0,1]", *OUT], r"'m' must be a finite number > 0"),
    Case("gen-set-k-string", GEN, ["coupled_oscillator", "--set", "system.k=\"x\"", *OUT], r"'k' must be a finite number"),
    Case("gen-set-m-scalar", GEN, ["coupled_oscillator", "--set", "system.m=2", *OUT], r"'m'"),
    # --- --out --------------------------------------------------------------------------------------
    Case("gen-out-is-dir", GEN, ["{spec}", "--out", "{dir}"], r"is a directory", exit_code=2),
    Case("gen-out-is-spec", GEN, ["{spec}", "--out", "{spec}"], r"--out .*spec\.toml is the input file"),
    Case("gen-out-under-file", GEN, ["{spec}", "--out", "{data}/x.h5"], r"--out.*data\.h5.*not a directory"),
    Case("gen-out-unwritable", GEN, ["{spec}", "--out", "/proc/vp_gen_test/x.h5"], r"--out.*(cannot|not writable)"),
    Case("gen-set-out-is-spec", GEN, ["{spec}", "--set", "output.path={spec}"], r"spec\.toml is the input file"),
    # --- readers ----------------------------------------------------------------------------------
    Case("data-read-nan", api=lambda ws: _read(ws.nan),
         match=r"nan\.h5: dataset '/y' holds NaN at \[2, 5, 1\] \(trajectory 2, state 5\).*allow_nonfinite=True"),
    Case("data-read-inf", api=lambda ws: _read(ws.inf), match=r"inf\.h5: dataset '/y' holds \+?Inf at \[3, 7, 0\]"),
    Case("data-read-nan-selected", api=lambda ws: _read(ws.nan, traj=[0, 2]), match=r"NaN at \[2, 5, 1\]"),
    Case("data-read-nan-shards", api=lambda ws: _read([ws.data, ws.nan]), match=r"nan\.h5: dataset '/y' holds NaN"),
    Case("data-read-t-nan", api=lambda ws: _read(_copy_with(ws, "tnan.h5", _set_t({4: np.nan}))),
         match=r"tnan\.h5: dataset '/t' holds NaN at \[4\]"),
    Case("data-read-t-decreasing", api=lambda ws: _read(_copy_with(ws, "tdec.h5", _set_t({4: 0.1}))),
         match=r"tdec\.h5: dataset '/t' is not strictly increasing at index 4"),
    Case("data-read-empty", api=lambda ws: _read(ws.empty), match=r"empty\.h5: not a readable HDF5 file"),
    Case("data-read-text", api=lambda ws: _read(ws.text), match=r"notes\.txt: not a readable HDF5 file"),
    Case("data-read-dir", api=lambda ws: _read(ws.dir), match=r"adir: is a directory"),
    Case("data-read-checkpoint", api=lambda ws: _read(ws.model), match=r"best\.pt: not a readable HDF5 file"),
    Case("data-read-rollout", api=lambda ws: _read(ws.rollout), match=r"rollout\.h5"),
    Case("data-read-v0", api=lambda ws: _read(ws.v0), match=r"v0\.h5: attribute 'schema_version' is 0"),
    Case("data-read-traj-out-of-range", api=lambda ws: _read(ws.data, traj=100), match=r"traj index out of range"),
    Case("data-read-traj-float", api=lambda ws: _read(ws.data, traj=1.5), match=r"traj must be None, an int"),
    Case("data-read-steps-bool-shape", api=lambda ws: _read(ws.data, steps=np.array([True, False])),
         match=r"boolean steps selection must have shape \(21,\)"),
    Case("data-read-shards-mismatch", api=lambda ws: _read([ws.data, ws.co]), match=r"co\.h5: attribute '(dim|system)'"),
    Case("data-read-empty-list", api=lambda ws: _read([]), match=r"empty list of files"),
    Case("data-read-allow-nonfinite-not-bool", api=lambda ws: _read(ws.nan, allow_nonfinite="yes"),
         match=r"allow_nonfinite must be True or False"),
    Case("data-metadata-text", api=lambda ws: _meta(ws.text), match=r"notes\.txt: not a readable HDF5 file"),
    # --- specs ------------------------------------------------------------------------------------
    Case("data-load-spec-hdf5", api=lambda ws: _load(ws.data), match=r"data\.h5.*not a TOML text file"),
    Case("data-load-spec-dir", api=lambda ws: _load(ws.dir), match=r"adir.*is a directory"),
    Case("data-load-spec-unknown-override", api=lambda ws: _load(ws.spec, foo=1), match=r"unknown override 'foo'"),
    Case("data-load-spec-dt-nan", api=lambda ws: _load(ws.spec, dt=float("nan")), match=r"dt must be a finite number > 0"),
    Case("data-load-spec-bad-method", api=lambda ws: _load(ws.spec, method="euler9"), match=r"unknown method 'euler9'"),
    Case("data-load-spec-not-a-path", api=lambda ws: _load(3.5), match=r"spec must be a spec name or a path"),
    Case("data-load-spec-table-is-value", api=lambda ws: _load(_spec_file(ws, 'system = "rigid_body"\n')),
         match=r"key 'system' must be a table"),
    Case("data-load-spec-user-system-missing-module",
         api=lambda ws: _load(_user_system_spec(ws, "no_such_module_xyz:Sys")), match=r"cannot import module 'no_such_module_xyz'"),
    Case("data-load-spec-user-system-not-a-system", api=lambda ws: _load(_user_system_spec(ws, "builtins:int")),
         match=r"int is not a vpintegrator System subclass"),
    Case("data-load-spec-user-system-raises-on-import",
         api=lambda ws: _with_module(ws, "vp_broken_mod", "1 / 0\n",
                                     lambda: _load(_user_system_spec(ws, "vp_broken_mod:Sys"))),
         match=r"cannot import module 'vp_broken_mod' \(ZeroDivisionError"),
    Case("data-load-spec-user-system-syntax-error",
         api=lambda ws: _with_module(ws, "vp_syntax_mod", "def (:\n",
                                     lambda: _load(_user_system_spec(ws, "vp_syntax_mod:Sys"))),
         match=r"cannot import module 'vp_syntax_mod' \(SyntaxError"),
    Case("data-load-spec-user-system-bad-class",
         api=lambda ws: _with_module(
             ws, "vp_bad_sys",
             "from dataclasses import dataclass\nfrom vpintegrator.systems import System\n"
             "@dataclass(frozen=True)\nclass Sys(System):\n    name = 'vp_bad_sys'\n    dim = 0\n",
             lambda: _load(_user_system_spec(ws, "vp_bad_sys:Sys"))),
         match=r"dim must be a positive int"),
    Case("data-spec-t-end-inf", api=lambda ws: _spec(t_end=float("inf")), match=r"t_end must be a finite number > 0"),
    Case("data-spec-steps-overflow", api=lambda ws: _spec(dt=1e-300, t_end=1e300), match=r"too many"),
    Case("data-spec-params-not-table", api=lambda ws: _spec(params=[1, 2]), match=r"params must be a table"),
    # --- generate -----------------------------------------------------------------------------------
    Case("data-generate-inertia-short", api=lambda ws: _gen(_load(ws.spec, params={"inertia": [1, 2]})),
         match=r"inertia.*3 positive numbers"),
    Case("data-generate-out-is-spec", api=lambda ws: _gen(ws.spec, out=ws.spec), match=r"out .*spec\.toml is the input file"),
    Case("data-generate-out-is-dir", api=lambda ws: _gen(ws.spec, out=ws.dir), match=r"out .*adir.*is a directory"),
    Case("data-generate-memory", api=lambda ws: _gen(_load(ws.spec, dt=1e-9, t_end=10), out=_out(ws)),
         match=r"[GTP]iB.*memory"),
    Case("data-generate-in-memory-too-big",
         api=lambda ws: _memory_limit(ws, 2**20, lambda: _gen(_load(ws.spec, n_traj=100000))),
         match=r"MiB.*memory.*n_traj"),
    Case("data-generate-disk-too-big", api=lambda ws: _gen(_load(ws.spec, n_traj=10**8, t_end=100.0), out=_out(ws)),
         match=r"[GTP]iB.*(disk|memory)"),
    Case("data-generate-not-a-spec", api=lambda ws: _gen(42), match=r"spec must be a spec name or a path"),
    # --- writer, container ------------------------------------------------------------------------
    Case("data-write-onto-dir", api=lambda ws: _write(ws.dir, _traj()), match=r"adir.*is a directory"),
    Case("data-write-under-file", api=lambda ws: _write(os.path.join(ws.data, "x.h5"), _traj()),
         match=r"data\.h5.*not a directory"),
    Case("data-write-not-trajectories", api=lambda ws: _write(_out(ws), np.zeros((2, 5, 3))), match=r"expected a Trajectories"),
    Case("data-write-t-decreasing", api=lambda ws: _write(_out(ws), _traj(t=np.array([0, 0.1, 0.05, 0.2, 0.3]))),
         match=r"t.*strictly increasing"),
    Case("data-write-no-trajectories", api=lambda ws: _write(_out(ws, "x.toml"), _traj(y=np.zeros((0, 5, 3)))),
         match=r"n_traj must be a positive int"),
    Case("data-trajectories-2d", api=lambda ws: _traj(y=np.zeros((3, 3)), t=np.zeros(3)), match=r"shape \(n_traj, n_states, dim\)"),
    Case("data-trajectories-t-shape", api=lambda ws: _traj(t=np.zeros(4)), match=r"Trajectories\.t must have shape \(n_states,\) = \(5,\)"),
    Case("data-trajectories-failed-shape", api=lambda ws: _traj(failed_step=[0, 1, 2]), match=r"failed_step must have shape"),
    Case("data-trajectories-strings", api=lambda ws: _traj(y=np.full((1, 5, 3), "a")), match=r"Trajectories\.y must be numbers"),
    Case("data-trajectories-meta-list", api=lambda ws: _traj(meta=[1, 2]), match=r"Trajectories\.meta must be a dict"),
    # --- systems, samplers ------------------------------------------------------------------------
    Case("data-get-system-bad-path", api=lambda ws: _system("x:y"), match=r"cannot import module 'x'"),
    Case("data-get-system-unknown", api=lambda ws: _system("pendulum"), match=r"unknown system 'pendulum'; valid systems"),
    Case("data-get-system-no-class", api=lambda ws: _system("vpintegrator.systems:NoSuch"), match=r"has no attribute 'NoSuch'"),
    Case("data-get-system-inertia-none", api=lambda ws: _system("rigid_body", inertia=None), match=r"inertia.*3 positive numbers"),
    Case("data-get-system-m-scalar", api=lambda ws: _system("coupled_oscillator", m=1.0), match=r"'m'"),
    Case("data-get-system-not-a-name", api=lambda ws: _system(3), match=r"unknown system 3"),
    Case("data-sample-unknown-sampler", api=lambda ws: _sample("rigid_body", "nope", 3), match=r"unknown initial-condition sampler"),
    Case("data-sample-box-low-high", api=lambda ws: _sample("rigid_body", "box", 3, 0, low=1, high=0), match=r"low < high"),
    Case("data-sample-n-negative", api=lambda ws: _sample("rigid_body", "sphere", -3, 0), match=r"must be an int >= 1"),
    Case("data-sample-no-rng", api=lambda ws: _sample("rigid_body", "sphere", 3), match=r"needs rng"),
    Case("data-sample-paper-dim", api=lambda ws: _sample("coupled_oscillator", "paper_sphere"), match=r"dim=4"),
    Case("data-solve-flow-nan-y0",
         api=lambda ws: __import__("vpintegrator.data.generation", fromlist=["x"]).solve_flow(
             "rigid_body", np.array([[np.nan, 0, 1]]), np.arange(3) * 0.1), match=r"initial condition 0 is not finite"),
]
