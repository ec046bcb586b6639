"""Bad inputs to the Python API outside data/training/rollout: integrators, the config layer, devices,
structure checks, the root namespace."""

from pathlib import Path

import numpy as np

from bad_inputs import Case

_GML_VPFF = Path(__file__).resolve().parent.parent / "data" / "gml" / "transformer_rigid_body_nn_vpff.h5"


def _integrate(**kw):
    from vpintegrator import integrate

    args = {"system": "rigid_body", "y0": [[1.0, 0.0, 0.0]], "dt": 0.1, "n_steps": 2, "method": "rk4", **kw}
    return integrate(**args)


def _parse_set(items):
    from vpintegrator.config import parse_set

    return parse_set(items)


def _read_toml(path, **kw):
    from vpintegrator.config import read_toml

    return read_toml(path, **kw)


def _device(name):
    from vpintegrator.device import resolve_device

    return resolve_device(name)


def _integrator(name):
    from vpintegrator import get_integrator

    return get_integrator(name)


def _load_model(path, **kw):
    from vpintegrator.models import load_model

    return load_model(path, **kw)


def _gml(path_or_query, **kw):
    """``load_model("gml:...")`` of a workspace file, or of the shipped GML VPFF with a ``?query``."""
    text = str(path_or_query)
    return _load_model(f"gml:{_GML_VPFF}{text}" if text.startswith("?") else f"gml:{text}", **kw)


def _volume(model, **kw):
    from vpintegrator.testing import assert_volume_preserving

    return assert_volume_preserving(model, **kw)


CASES = [
    Case("api-integrate-dt-nan", api=lambda ws: _integrate(dt=float("nan")), match=r"dt must be a finite number > 0"),
    Case("api-integrate-dt-zero", api=lambda ws: _integrate(dt=0.0), match=r"dt must be a finite number > 0"),
    Case("api-integrate-dt-bool", api=lambda ws: _integrate(dt=True), match=r"dt must be"),
    Case("api-integrate-n-steps-negative", api=lambda ws: _integrate(n_steps=-1), match=r"n_steps must be an int >= 0"),
    Case("api-integrate-n-steps-float", api=lambda ws: _integrate(n_steps=2.5), match=r"n_steps must be an int"),
    Case("api-integrate-unknown-method", api=lambda ws: _integrate(method="leapfrog"), match=r"unknown method 'leapfrog'; valid methods"),
    Case("api-integrate-unknown-system", api=lambda ws: _integrate(system="pendulum"), match=r"unknown system 'pendulum'"),
    Case("api-integrate-y0-wrong-dim", api=lambda ws: _integrate(y0=[[1.0, 0.0]]), match=r"shape"),
    Case("api-integrate-y0-nan", api=lambda ws: _integrate(y0=[[np.nan, 0.0, 1.0]]), match=r"finite"),
    Case("api-integrate-stormer-verlet-rigid-body", api=lambda ws: _integrate(method="stormer_verlet"),
         match=r"needs a separable Hamiltonian"),
    Case("api-integrate-t0-inf", api=lambda ws: _integrate(t0=float("inf")), match=r"t0 must be a finite number"),
    Case("api-get-integrator-unknown", api=lambda ws: _integrator("rk5"), match=r"unknown method 'rk5'"),
    Case("api-get-system-bad-param", api=lambda ws: __import__("vpintegrator").get_system("rigid_body", mass=1.0),
         match=r"has no parameter\(s\) mass"),
    Case("api-get-system-bad-inertia", api=lambda ws: __import__("vpintegrator").get_system("rigid_body", inertia=(1.0, -2.0, 3.0)),
         match=r"inertia"),
    Case("api-set-no-equals", api=lambda ws: _parse_set(["lr"]), match=r"'lr' is not KEY=VALUE"),
    Case("api-set-empty-key", api=lambda ws: _parse_set(["=3"]), match=r"is not KEY=VALUE"),
    Case("api-set-table-over-value", api=lambda ws: _parse_set(["model=3", "model.L=2"]), match=r"sets a key inside 'model'"),
    Case("api-read-toml-hdf5", api=lambda ws: _read_toml(ws.data), match=r"not a TOML text file"),
    Case("api-read-toml-missing", api=lambda ws: _read_toml(ws.out + "/missing.toml"), match=r"no such file"),
    Case("api-read-toml-dir", api=lambda ws: _read_toml(ws.dir), match=r"is a directory"),
    Case("api-read-toml-text", api=lambda ws: _read_toml(ws.text), match=r"malformed TOML"),
    Case("api-device-unknown", api=lambda ws: _device("tpu"), match=r"unknown device 'tpu'"),
    Case("api-device-cuda-missing", api=lambda ws: _device("cuda:0"), match=r"CUDA is not available|only \d+ CUDA"),
    Case("api-root-unknown-name", api=lambda ws: __import__("vpintegrator").VPIntegratorError("x") and _device("gpu"),
         match=r"unknown device 'gpu'"),
    Case("api-volume-not-a-model", api=lambda ws: _volume("vpt"), match=r"model|Module"),
    # GeometricMachineLearning.jl weight files: load_model("gml:FILE.h5[?KEY=VALUE&...]", hparams=...)
    Case("api-gml-missing-file", api=lambda ws: _gml(ws.out + "/missing.h5"), match=r"missing.h5 does not exist"),
    Case("api-gml-text-file", api=lambda ws: _gml(ws.text), match=r"notes.txt: not an HDF5 file"),
    Case("api-gml-empty-file", api=lambda ws: _gml(ws.empty), match=r"empty.h5: not an HDF5 file"),
    Case("api-gml-directory", api=lambda ws: _gml(ws.dir), match=r"adir: is a directory"),
    Case("api-gml-torch-checkpoint", api=lambda ws: _gml(ws.model), match=r"best.pt: not an HDF5 file"),
    Case("api-gml-trajectory-file", api=lambda ws: _gml(ws.data),
         match=r"data.h5: no groups L1 … Ln at the top level: not a GeometricMachineLearning weight file"),
    Case("api-gml-rollout-file", api=lambda ws: _gml(ws.rollout), match=r"rollout.h5: no groups L1 … Ln"),
    Case("api-gml-config-contradicts-file", api=lambda ws: _gml("?n_blocks=3"),
         match=r"config n_blocks = 3 contradicts group L1…L26, which gives n_blocks = 6"),
    Case("api-gml-name-contradicts-file", api=lambda ws: _gml("?", hparams={"name": "st"}),
         match=r"name 'st' contradicts group L1 \(VolumePreservingLowerLayer\): the file holds a 'vpff' network"),
    Case("api-gml-symmetric", api=lambda ws: _gml("?symmetric=true"),
         match=r"symmetric = true: GML has no symmetric \(palindromic\) variant, its weights define the plain composition"),
    Case("api-gml-spec-no-value", api=lambda ws: _gml("?seq_len"), match=r"'seq_len' is not KEY=VALUE"),
    Case("api-gml-unknown-key", api=lambda ws: _gml("?depth=2"), match=r"unknown key 'depth'"),
    Case("api-gml-bad-dtype", api=lambda ws: _gml("?dtype=float16"), match=r"dtype must be one of float32, float64; got 'float16'"),
    Case("api-load-model-hparams-not-gml", api=lambda ws: _load_model(ws.model, hparams={"seq_len": 3}),
         match=r"hparams is only for gml:FILE.h5 weight files"),
]
