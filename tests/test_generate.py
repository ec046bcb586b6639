"""Generation specs and data generation: vectorised DOP853 against per-trajectory references,
invariants, classical methods, chunking, files."""

from __future__ import annotations

import dataclasses
import importlib
import subprocess
import sys

import numpy as np
import pytest
from scipy.integrate import solve_ivp
from ulp import assert_ulp_close

from vpintegrator.data import GenerationSpec, generate, list_specs, load_spec, read_trajectories, solve_flow
from vpintegrator.errors import VPIntegratorError
from vpintegrator.data import integrate
from vpintegrator.systems import get_system, paper_sphere_points
from vpintegrator import resources

SHIPPED = ["rigid_body_paper", "rigid_body", "coupled_oscillator", "coupled_oscillator_box", "volterra", "abc_flow"]


def _reference(system, y0, t, rtol=2.3e-14, atol=1e-16):
    """Independent reference: one scalar-state solve_ivp(DOP853) per trajectory, tighter tolerances."""
    out = []
    for y in y0:
        sol = solve_ivp(lambda s, z: system.vector_field(z), (t[0], t[-1]), y, method="DOP853", t_eval=t, rtol=rtol, atol=atol)
        assert sol.success
        out.append(sol.y.T)
    return np.array(out)


# --- solve_flow -------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def paper_flow():
    """The paper data set, generated once for this module (1238, 101, 3)."""
    return generate(load_spec("rigid_body_paper"))


def test_paper_set_shape_and_grid(paper_flow):
    assert paper_flow.y.shape == (1238, 101, 3)
    np.testing.assert_array_equal(paper_flow.t, np.arange(101) * 0.2)  # t = k dt exactly
    np.testing.assert_array_equal(paper_flow.y[:, 0], paper_sphere_points())


def test_paper_set_stays_on_unit_sphere(paper_flow):
    assert np.max(np.abs(np.linalg.norm(paper_flow.y, axis=-1) - 1)) <= 1e-10


def test_paper_set_conserves_energy(paper_flow):
    system = get_system("rigid_body")
    energy = system.invariant("energy", paper_flow.y)
    assert np.max(np.abs(energy - energy[:, :1]) / energy[:, :1]) <= 1e-10
    assert paper_flow.meta["max_rel_drift_energy"] <= 1e-10


def test_paper_set_against_independent_reference_subset(paper_flow):
    system = get_system("rigid_body")
    idx = np.r_[0:1238:97, 100, 719, 619 + 147]  # spread over both families, the paper's 1 and 4, near (0, 1, 0)
    ref = _reference(system, paper_flow.y[idx, 0], paper_flow.t)
    assert np.max(np.abs(paper_flow.y[idx] - ref)) <= 1e-9


def test_vectorised_is_at_least_as_accurate_as_a_per_trajectory_loop(paper_flow):
    """Where the vectorised result and a loop of solve_ivp calls (same tolerances) differ most, it is the
    loop that is off: v = 1.57 starts 8e-4 from the unstable equilibrium (0, 1, 0)."""
    system = get_system("rigid_body")
    idx = [619 + 147, 619 + 461]  # the two largest |vectorised - loop| in scripts/bench_gen.py
    ref = _reference(system, paper_flow.y[idx, 0], paper_flow.t)
    loop = _reference(system, paper_flow.y[idx, 0], paper_flow.t, rtol=1e-12, atol=1e-12)
    assert np.max(np.abs(paper_flow.y[idx] - ref)) <= np.max(np.abs(loop - ref))


@pytest.mark.slow
def test_paper_set_against_independent_reference_all(paper_flow):
    system = get_system("rigid_body")
    ref = _reference(system, paper_flow.y[:, 0], paper_flow.t)
    assert np.max(np.abs(paper_flow.y - ref)) <= 1e-9


@pytest.mark.parametrize("name", ["rigid_body", "coupled_oscillator", "volterra", "abc_flow"])
def test_solve_flow_matches_per_trajectory_solves(name):
    """Vectorised over a batch == each trajectory solved alone (to the reference's accuracy)."""
    system = get_system(name)
    rng = np.random.default_rng(1)
    y0 = rng.uniform(0.5, 1.5, size=(40, system.dim))
    t = np.arange(26) * 0.2
    y = solve_flow(system, y0, t)
    ref = _reference(system, y0[::8], t)
    assert np.max(np.abs(y[::8] - ref)) <= 1e-9 * max(1.0, np.max(np.abs(ref)))


def test_solve_flow_single_trajectory_equals_plain_solve_ivp():
    system = get_system("rigid_body")
    y0 = paper_sphere_points()[100:101]
    t = np.arange(51) * 0.2
    y = solve_flow(system, y0, t)
    sol = solve_ivp(lambda s, z: system.vector_field(z), (0, 10), y0[0], method="DOP853", t_eval=t, rtol=1e-12, atol=1e-12)
    # the compiled DOP853 against SciPy's: the same algorithm, two code paths (1.2e-15 apart on some CPUs)
    assert_ulp_close(y[0, 1:], sol.y.T[1:], steps=t.size)


def test_solve_flow_splits_batches_below_scipy_rtol_floor(recwarn):
    system = get_system("rigid_body")
    y0 = np.random.default_rng(0).standard_normal((30, 3))
    t = np.arange(6) * 0.2
    y = solve_flow(system, y0, t, rtol=1e-13, atol=1e-13)  # 20 trajectories per solve_ivp call
    assert not [w for w in recwarn if "rtol" in str(w.message)]
    np.testing.assert_allclose(y, _reference(system, y0, t), rtol=0, atol=1e-11)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"y0": np.zeros((2, 4))}, "shape"),
        ({"y0": np.array([[0.0, np.nan, 1.0]])}, "not finite"),
        ({"t": np.array([0.0, 0.2, 0.1])}, "increasing"),
        ({"rtol": 0.0}, "rtol"),
        ({"atol": float("nan")}, "atol"),
    ],
)
def test_solve_flow_bad_input(kwargs, match):
    args = {"system": "rigid_body", "y0": np.ones((2, 3)), "t": np.arange(3) * 0.1, **kwargs}
    with pytest.raises(VPIntegratorError, match=match):
        solve_flow(**args)


# --- generate ---------------------------------------------------------------------------------------


def test_coupled_oscillator_conserves_energy():
    traj = generate(load_spec("coupled_oscillator"))
    assert traj.y.shape == (1, 251, 4)
    np.testing.assert_array_equal(traj.y[0, 0], [1.0, 0.0, 2.0, 0.0])
    energy = get_system("coupled_oscillator").invariant("energy", traj.y)
    assert np.max(np.abs(energy - energy[:, :1]) / np.abs(energy[:, :1])) <= 1e-9


def test_implicit_midpoint_reproduces_integrate():
    spec = load_spec("rigid_body_paper", method="implicit_midpoint", n_traj=64, t_end=4.0)
    traj = generate(spec)
    system = get_system("rigid_body")
    y0 = traj.y[:, 0]
    want = integrate(system, y0, 0.2, 20, method="implicit_midpoint", compiled=False)
    # bit for bit: generate calls integrate's NumPy step for a fixed-step method (the same code on the same data)
    np.testing.assert_array_equal(traj.y, want.y)
    np.testing.assert_array_equal(traj.t, want.t)
    assert traj.meta["method"] == "implicit_midpoint"


@pytest.mark.parametrize("method", ["rk4", "splitting", "gauss_legendre4"])
def test_other_classical_methods_match_integrate(method):
    spec = load_spec("rigid_body", method=method, n_traj=5, t_end=1.0)
    traj = generate(spec)
    # bit for bit: generate calls integrate's NumPy step for a fixed-step method (compiled=False)
    want = integrate(get_system("rigid_body"), traj.y[:, 0], 0.1, 10, method=method, compiled=False)
    np.testing.assert_array_equal(traj.y, want.y)


def test_chunking_does_not_change_the_data_beyond_tolerance():
    spec = load_spec("rigid_body", n_traj=50, t_end=5.0)
    whole = generate(spec)
    chunked = generate(dataclasses.replace(spec, chunk_size=7))
    np.testing.assert_array_equal(whole.y[:, 0], chunked.y[:, 0])
    assert np.max(np.abs(whole.y - chunked.y)) <= 1e-10
    assert chunked.meta["chunk_size"] == 7


def test_seed_controls_initial_conditions():
    spec = load_spec("rigid_body", n_traj=3, t_end=0.2)
    a, b, c = generate(spec), generate(spec), generate(spec.replace(seed=1))
    np.testing.assert_array_equal(a.y, b.y)
    assert not np.allclose(a.y[:, 0], c.y[:, 0])
    np.testing.assert_allclose(np.linalg.norm(a.y[:, 0], axis=-1), 1.0, rtol=0, atol=1e-15)


def test_generate_to_file_equals_in_memory_and_reports_progress(tmp_path):
    spec = load_spec("volterra", n_traj=23, t_end=1.0, chunk_size=10)
    calls = []
    path = generate(spec, out=tmp_path / "v.h5", progress=lambda done, total: calls.append((done, total)))
    assert calls == [(0, 23), (10, 23), (20, 23), (23, 23)]
    on_disk = read_trajectories(path)
    in_memory = generate(spec)
    np.testing.assert_array_equal(on_disk.y, in_memory.y)
    meta = on_disk.meta
    for key in ("schema_version", "system", "dim", "dt", "method", "rtol", "atol", "seed", "n_traj", "n_states", "n_steps",
                "t_end", "invariant_names", "vpintegrator_version", "sampler", "sampler_args", "generator"):
        assert key in meta, key
    assert meta["system"] == "volterra" and meta["invariant_names"] == ["sum", "product"]
    assert meta["max_rel_drift_sum"] <= 1e-10 and meta["max_rel_drift_product"] <= 1e-9
    assert (meta["n_traj"], meta["n_states"], meta["n_steps"], meta["dim"]) == (23, 11, 10, 3)
    assert meta["sampler_args"] == '{"low": 0.5, "high": 2.0}'


def test_generate_records_system_parameters(tmp_path):
    meta = read_trajectories(generate(load_spec("rigid_body", n_traj=2, t_end=0.2), out=tmp_path / "r.h5")).meta
    assert meta["param_inertia"] == [2.0, 1.0, 2.0 / 3.0]
    assert (meta["param_a"], meta["param_b"], meta["param_c"]) == pytest.approx((0.5, -1.0, 0.5))


def test_generate_accepts_a_spec_name():
    traj = generate("coupled_oscillator")
    assert traj.meta["spec"] == "coupled_oscillator"


def test_nan_initial_condition_names_the_file(tmp_path):
    spec_file = tmp_path / "nan.toml"
    spec_file.write_text(_toml(ic='sampler = "list"\npoints = [[0.0, nan, 1.0]]'))
    spec = load_spec(spec_file)
    with pytest.raises(VPIntegratorError, match=r"nan\.toml: \[initial_conditions\].*not finite"):
        generate(spec, out=tmp_path / "x.h5")
    assert not (tmp_path / "x.h5").exists()


# --- specs ------------------------------------------------------------------------------------------


def _toml(system='name = "rigid_body"', ic='sampler = "sphere"\nn_traj = 2', integration="dt = 0.1\nt_end = 0.5", extra=""):
    return f'description = "test"\n{extra}\n[system]\n{system}\n[initial_conditions]\n{ic}\n[integration]\n{integration}\n'


def test_list_specs_has_the_shipped_ones():
    assert set(SHIPPED) <= set(list_specs())


@pytest.mark.parametrize("name", SHIPPED)
def test_every_shipped_spec_loads_and_generates(name):
    spec = load_spec(name)
    assert spec.name == name and spec.description and spec.out == f"datasets/{name}.h5"
    assert spec.method == "dop853" and spec.rtol == spec.atol == 1e-12
    small = spec.replace(n_traj=None if spec.sampler in ("paper_sphere", "list") else 2, t_end=2 * spec.dt)
    traj = generate(small)
    assert traj.n_states == 3 and np.all(np.isfinite(traj.y))


def test_paper_spec_values():
    spec = load_spec("rigid_body_paper")
    assert (spec.system, spec.sampler, spec.dt, spec.t_end, spec.n_states) == ("rigid_body", "paper_sphere", 0.2, 20.0, 101)
    assert spec.params == {"inertia": [2.0, 1.0, 2.0 / 3.0]}


def test_coupled_oscillator_spec_is_the_geometric_problems_default():
    spec = load_spec("coupled_oscillator")
    assert spec.sampler_args == {"points": [[1.0, 0.0, 2.0, 0.0]]}
    assert (spec.dt, spec.t_end) == (0.4, 100.0)
    assert spec.params == {"m": [2.0, 1.0], "k1": 1.5, "k2": 0.3, "k": 1.0}


def test_overrides_win_and_none_is_ignored(tmp_path):
    spec = load_spec("rigid_body", n_traj=4, dt=0.05, t_end=1.0, method="rk4", rtol=1e-10, atol=1e-11,
                     seed=3, chunk_size=2, out=tmp_path / "x.h5", )
    assert (spec.n_traj, spec.dt, spec.t_end, spec.method, spec.rtol, spec.atol, spec.seed, spec.chunk_size) == (
        4, 0.05, 1.0, "rk4", 1e-10, 1e-11, 3, 2)
    assert spec.out == str(tmp_path / "x.h5") and spec.n_states == 21 and spec.n_steps == 20
    assert load_spec("rigid_body", dt=None) == load_spec("rigid_body")


def test_spec_from_path_and_default_out(tmp_path):
    path = tmp_path / "mine.toml"
    path.write_text(_toml())
    spec = load_spec(path)
    assert spec.name == "mine" and spec.source == str(path) and spec.out == "datasets/mine.h5"
    assert load_spec(str(path)) == spec


def test_t_end_not_a_multiple_of_dt_stops_at_the_last_multiple():
    spec = load_spec("rigid_body", dt=0.3, t_end=1.0)
    assert spec.n_states == 4 and spec.t[-1] == pytest.approx(0.9)
    assert load_spec("rigid_body_paper").n_states == 101  # 20 / 0.2 rounds to 100, not 99


@pytest.mark.parametrize(
    "content, match",
    [
        (_toml(extra="colour = 1"), r"unknown key 'colour'; valid top-level keys"),
        (_toml(integration="dt = 0.1\nt_end = 0.5\nstep = 2"), r"unknown key 'integration.step'"),
        (_toml(integration="dt = 0\nt_end = 0.5"), r"key 'integration.dt' must be a finite number > 0; got 0"),
        (_toml(integration="dt = -1.0\nt_end = 0.5"), r"'integration.dt'.*got -1.0"),
        (_toml(integration="dt = nan\nt_end = 0.5"), r"'integration.dt'.*got nan"),
        (_toml(integration='dt = "0.1"\nt_end = 0.5'), r"'integration.dt' must be a finite number"),
        (_toml(integration="dt = 0.1\nt_end = 0.5\nseed = 1.5"), r"'integration.seed' must be an integer"),
        (_toml(integration="dt = 0.1\nt_end = 0.5\nmethod = 'rk5'"), r"'integration.method': unknown method 'rk5'; valid methods: dop853, "),
        (_toml(integration="t_end = 0.5"), r"missing key 'integration.dt'"),
        (_toml(integration="dt = 1.0\nt_end = 0.5"), r"t_end \(0.5\) must be >= dt"),
        (_toml(ic='sampler = "sphere"\nn_traj = true'), r"'initial_conditions.n_traj' must be an integer"),
        (_toml(ic='sampler = "cube"'), r"unknown sampler 'cube'; valid samplers"),
        (_toml(system='name = "pendulum"'), r"\[system\] unknown system 'pendulum'; valid systems"),
        (_toml(system='name = "rigid_body"\nmass = 1'), r"\[system\] .*mass"),
        (_toml(system='name = "rigid_body"\ninertia = [1, 2]'), r"\[system\] .*inertia"),
        ('description = "x"\n[system]\nname = "rigid_body"\n[integration]\ndt = 0.1\nt_end = 1', r"missing table \[initial_conditions\]"),
        ('description = "x"\nsystem = "rigid_body"', r"key 'system' must be a table"),
        ("[system\nname = 1", r"malformed TOML"),
    ],
)
def test_bad_spec_files(tmp_path, content, match):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    with pytest.raises(VPIntegratorError, match=match) as info:
        load_spec(path)
    assert str(path) in str(info.value) and "\n" not in str(info.value)


def test_unknown_spec_name_lists_valid_ones():
    with pytest.raises(VPIntegratorError, match=r"unknown spec 'nope'; valid specs: .*rigid_body_paper"):
        load_spec("nope")
    with pytest.raises(VPIntegratorError, match=r"spec file 'nope.toml' not found"):
        load_spec("nope.toml")


@pytest.mark.parametrize(
    "overrides, match",
    [
        ({"dt": 0}, r"^dt must be a finite number > 0; got 0"),
        ({"dt": -1.0}, r"^dt must"),
        ({"t_end": float("inf")}, r"^t_end must"),
        ({"n_traj": 0}, r"^n_traj must"),
        ({"method": "leapfrog"}, r"unknown method 'leapfrog'"),
        ({"colour": 1}, r"unknown override 'colour'; valid overrides"),
        ({"dt": 5.0, "t_end": 1.0}, r"t_end \(1\) must be >= dt \(5\)"),
    ],
)
def test_bad_overrides(overrides, match):
    with pytest.raises(VPIntegratorError, match=match):
        load_spec("rigid_body", **overrides)


def test_generation_spec_validates_on_construction():
    with pytest.raises(VPIntegratorError, match="GenerationSpec.dt"):
        GenerationSpec(name="x", system="rigid_body", sampler="sphere", dt=0.0, t_end=1.0)
    spec = GenerationSpec(name="x", system="rigid_body", sampler="sphere", dt=0.5, t_end=1.0, n_traj=2)
    assert spec.out == "datasets/x.h5" and generate(spec).y.shape == (2, 3, 3)


def test_data_package_does_not_import_torch():
    code = (
        "import sys, vpintegrator.data as d; d.generate; d.read_trajectories; d.load_spec; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


# ---------------------------------------------------------------------------------------------------
# work that cannot fit is refused before it starts


def _spy_sampler(monkeypatch):
    """Record whether generation got as far as sampling (it must not, when refused)."""
    gen = importlib.import_module("vpintegrator.data.generation")

    calls = []
    real = gen.sample_initial_conditions
    monkeypatch.setattr(gen, "sample_initial_conditions", lambda *a, **k: calls.append(1) or real(*a, **k))
    return calls


def test_estimate_resources_from_the_sizes():
    from vpintegrator.data.generation import estimate_resources
    from vpintegrator.data.generation_plan import build_plan

    spec = load_spec("rigid_body", n_traj=10, dt=0.1, t_end=1.0, method="rk4")
    need = estimate_resources(build_plan(spec), 10)
    assert need["disk"] == 10 * 11 * 3 * 8 and need["chunk"] == 10 and need["chunk_bytes"] == 10 * 11 * 3 * 8
    assert need["memory"] >= 3 * need["chunk_bytes"]
    dop = estimate_resources(build_plan(dataclasses.replace(spec, method="dop853")), 10)
    assert dop["memory"] > need["memory"]  # DOP853's dense output is counted
    mem = estimate_resources(build_plan(spec), 10, in_memory=True)
    assert mem["disk"] == 0 and mem["memory"] >= need["memory"] + 10 * 11 * 3 * 8
    # one trajectory of 1e10 states: one chunk of one trajectory, 240 GB before its working copies
    huge = estimate_resources(build_plan(load_spec("rigid_body", dt=1e-9, t_end=10.0)), 300)
    assert huge["chunk"] == 1 and huge["chunk_bytes"] == 8 * 3 * 10_000_000_001


def test_one_trajectory_that_cannot_fit_in_memory_is_refused(tmp_path, monkeypatch):
    calls = _spy_sampler(monkeypatch)
    spec = load_spec("rigid_body", dt=1e-9, t_end=10.0)  # `vp-gen rigid_body --dt 1e-9 --t-end 10`
    with pytest.raises(VPIntegratorError, match=r"one trajectory of 10000000001 states needs about 1\.\d TiB of "
                                                r"memory .*; give a larger dt or a smaller t_end") as info:
        generate(spec, out=tmp_path / "x.h5")
    assert info.value.key == "dt" and calls == [] and list(tmp_path.iterdir()) == []


def test_chunks_that_cannot_fit_are_refused_with_the_limit_monkeypatched(tmp_path, monkeypatch):

    monkeypatch.setattr(resources, "available_memory", lambda: 4 * 2**20)
    calls = _spy_sampler(monkeypatch)
    spec = load_spec("rigid_body", n_traj=2000, dt=0.01, t_end=10.0, method="rk4")  # 2000 x 1001 x 3 x 8 = 48 MB
    with pytest.raises(VPIntegratorError, match=r"chunks of \d+ trajectories x 1001 states need about .* MiB of "
                                                r"memory but only 2\.0 MiB may be used.*smaller chunk_size") as info:
        generate(spec, out=tmp_path / "x.h5")
    assert info.value.key == "chunk_size" and calls == []
    # a smaller chunk fits
    assert generate(dataclasses.replace(spec, n_traj=3, chunk_size=2), out=tmp_path / "y.h5").exists()
    # in memory, the whole array counts
    with pytest.raises(VPIntegratorError, match=r"keeping 2000 trajectories .* in memory .*; give out") as info:
        generate(dataclasses.replace(spec, chunk_size=1))
    assert info.value.key == "out"


def test_initial_conditions_that_cannot_fit_are_refused(tmp_path, monkeypatch):
    calls = _spy_sampler(monkeypatch)
    with pytest.raises(VPIntegratorError, match=r"initial conditions of 1000000000000000 trajectories alone need "
                                                r"21\.3 PiB of memory.*fewer trajectories \(n_traj\)"):
        generate(load_spec("rigid_body", n_traj=10**15), out=tmp_path / "x.h5")
    assert calls == []


def test_data_that_cannot_fit_on_disk_is_refused(tmp_path, monkeypatch):

    monkeypatch.setattr(resources, "free_disk", lambda folder: 1000)
    calls = _spy_sampler(monkeypatch)
    spec = load_spec("rigid_body", n_traj=4, dt=0.1, t_end=1.0, method="rk4")  # 4 x 11 x 3 x 8 = 1056 bytes
    with pytest.raises(VPIntegratorError, match=r"4 trajectories x 11 states x dim 3 x 8 bytes = 1\.0 KiB \(before "
                                                r"compression\) would not fit on the disk of .* \(1000 B free\); "
                                                r"give fewer trajectories \(n_traj\).*shards") as info:
        generate(spec, out=tmp_path / "x.h5")
    assert info.value.key == "n_traj" and calls == [] and list(tmp_path.iterdir()) == []
    assert generate(spec).n_traj == 4  # in memory: no disk needed


def test_available_memory_is_a_positive_number_of_bytes():
    from vpintegrator.resources import available_memory

    assert available_memory() > 2**20


# ---------------------------------------------------------------------------------------------------
# outputs and numbers that cannot work


def test_generate_refuses_to_overwrite_its_spec(tmp_path):
    spec_file = tmp_path / "s.toml"
    spec_file.write_text(_toml())
    before = spec_file.read_bytes()
    for out in (spec_file, tmp_path / "." / "s.toml"):
        with pytest.raises(VPIntegratorError, match=r"s\.toml is the input file .*give another output path"):
            generate(spec_file, out=out)
    assert spec_file.read_bytes() == before


@pytest.mark.parametrize("make, match", [
    (lambda d: (d / "adir").mkdir() or d / "adir", r"adir is a directory"),
    (lambda d: (d / "f").write_text("x") and d / "f" / "x.h5", r"f is a file, not a directory"),
])
def test_generate_refuses_outputs_it_cannot_write_before_work(tmp_path, monkeypatch, make, match):
    out = make(tmp_path)
    calls = _spy_sampler(monkeypatch)
    with pytest.raises(VPIntegratorError, match=match) as info:
        generate(load_spec("rigid_body", n_traj=2, t_end=1.0, method="rk4"), out=out)
    assert info.value.key == "out" and calls == []


@pytest.mark.parametrize("overrides, match", [
    ({"seed": 2**63}, r"seed must be an integer >= 0 and < 2\*\*63"),
    ({"rtol": 1.0}, r"rtol must be < 1"),
    ({"dt": 1e-300, "t_end": 1e300}, r"too many steps: give a larger dt or a smaller t_end"),
    ({"t_end": 1e15}, r"too many steps"),
    ({"params": {"inertia": [1, 2]}}, r"\[system\] RigidBody parameter 'inertia' must be 3 positive numbers"),
    ({"params": {"name": "x"}}, r"has no parameter\(s\) name"),
    ({"sampler": "nope"}, r"unknown sampler 'nope'"),
])
def test_more_bad_overrides(overrides, match):
    with pytest.raises(VPIntegratorError, match=match):
        load_spec("rigid_body", **overrides)


def test_sampler_can_be_overridden():
    spec = load_spec("rigid_body", sampler="box", n_traj=3, sampler_args={})
    assert spec.sampler == "box"


@pytest.mark.parametrize("bad, match", [
    (42, r"spec must be a spec name or a path to a \.toml file"),
    (".", r"is a directory"),
])
def test_load_spec_refuses_what_is_not_a_spec(bad, match):
    with pytest.raises(VPIntegratorError, match=match):
        load_spec(bad)


@pytest.mark.parametrize("compression,filter_name", [("none", None), ("lzf", "lzf"), ("gzip", "gzip")])
def test_compression_key_sets_the_filter_of_y_and_keeps_the_values(tmp_path, compression, filter_name):
    import h5py

    spec = load_spec("rigid_body", n_traj=70, t_end=2.0)
    want = generate(spec).y
    path = generate(load_spec("rigid_body", n_traj=70, t_end=2.0, compression=compression), out=tmp_path / "c.h5")
    with h5py.File(path, "r") as f:
        assert f["y"].compression == filter_name and f["y"].shuffle == (filter_name is not None)
        np.testing.assert_array_equal(f["y"][:], want)


def test_compression_key_refuses_an_unknown_filter():
    with pytest.raises(VPIntegratorError, match="compression must be 'gzip' or 'lzf' or 'none'; got 'zip'"):
        load_spec("rigid_body", compression="zip")
