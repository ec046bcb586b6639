"""Bad data-only files (``/t`` or ``/time`` and ``/y``, optionally ``/params``, nothing of vpintegrator's: issue 58)
through the reader and the CLIs (ids ``ext-``). Each case writes its file under ``{out}`` (the one place of the
workspace that is not hashed) and reads it; every dataset is checked for finiteness, dtype, shape and meaning."""

from pathlib import Path

import numpy as np

from bad_inputs import Case

N, T, DT = 6, 11, 0.2


def _states() -> np.ndarray:
    rng = np.random.default_rng(3)
    return rng.uniform(-1.0, 1.0, (N, T, 2))


def _write(ws, name: str, t=None, y=None, params=None, time_key: str = "t", t_attrs=None, params_names=None) -> str:
    import h5py

    path = Path(ws.out) / f"{name}.h5"
    with h5py.File(path, "w") as f:
        f[time_key] = np.arange(T) * DT if t is None else t
        for key, value in (t_attrs or {}).items():
            f[time_key].attrs[key] = value
        f["y"] = _states() if y is None else y
        if params is not None:
            f["params"] = params
            if params_names is not None:
                f["params"].attrs["names"] = params_names
    return str(path)


def _read(path: str):
    from vpintegrator import read_trajectories

    return read_trajectories(path)


def _params_with(value: float) -> np.ndarray:
    p = np.ones((N, 2))
    p[4, 1] = value
    return p


def _transposed(ws) -> str:
    """y(time, trajectory, state) with its axes named by dimension scales, N == T so that the shapes alone agree."""
    import h5py

    path = Path(ws.out) / "transposed.h5"
    with h5py.File(path, "w") as f:
        f["time"] = np.arange(N) * DT
        f["trajectory"] = np.arange(N)
        f["y"] = np.zeros((N, N, 2))
        f["time"].make_scale("time")
        f["trajectory"].make_scale("trajectory")
        f["y"].dims[0].attach_scale(f["time"])
        f["y"].dims[1].attach_scale(f["trajectory"])
    return str(path)


def _fit(path: str, ws, **kw):
    from vpintegrator import fit

    return fit(dict(data=[path], model={"name": "vpff"}, epochs=1, device="cpu", out=ws.out + "/run", **kw))


def _fit_objects(ws, scale: float):
    from vpintegrator import Trajectories, fit

    return fit(model="vpff", train=Trajectories(y=_states() * scale, t=np.arange(T) * DT, meta={"dt": DT}), epochs=1,
               device="cpu", dtype="float64")


CASES = [
    Case("ext-params-nan", api=lambda ws: _read(_write(ws, "p_nan", params=_params_with(np.nan))),
         match=r"dataset '/params' holds NaN at \[4, 1\] \(trajectory 4, column 'params\[1\]'\)"),
    Case("ext-params-inf-named", api=lambda ws: _read(_write(ws, "p_inf", params=_params_with(-np.inf),
                                                             params_names=["k", "m"])),
         match=r"'/params' holds -Inf at \[4, 1\] \(trajectory 4, column 'm'\)"),
    Case("ext-params-strings", api=lambda ws: _read(_write(ws, "p_str", params=np.array([[b"a"]] * N))),
         match=r"dataset '/params' \(shape \(6, 1\)\) must be \(n_traj, p\)"),
    Case("ext-time-months", api=lambda ws: _read(_write(ws, "months", t=np.arange(T), time_key="time",
                                                        t_attrs={"units": "months since 2000-01-01"})),
         match=r"dataset '/time' is a date axis in 'months'.*no fixed length"),
    Case("ext-time-strings", api=lambda ws: _read(_write(ws, "tstr", t=np.array([b"2020-01-0%d" % i for i in range(T)]))),
         match=r"dataset '/t' has dtype .*not numbers: dates as text"),
    Case("ext-time-transposed", api=lambda ws: _read(_transposed(ws)),
         match=r"'/y' has its axes in the order \(time, trajectory, axis2\).*ds.transpose\('trajectory', 'time', 'axis2'\)"),
    Case("ext-time-nan-named-time", api=lambda ws: _read(_write(ws, "tnan", t=np.where(np.arange(T) == 2, np.nan, 1.0 * np.arange(T)),
                                                                time_key="time")),
         match=r"dataset '/time' holds NaN at \[2\]"),
    Case("ext-time-irregular-float32", api=lambda ws: _read(_write(ws, "t32", t=(np.arange(T) ** 1.2 * DT).astype(np.float32))),
         match=r"'/t' is not a regular grid.*written as float32"),
    Case("ext-y-no-component", api=lambda ws: _read(_write(ws, "y0", y=np.zeros((N, T, 0)))),
         match=r"'/y' has shape \(6, 11, 0\): no trajectory or no state component"),
    Case("ext-y-no-trajectory", api=lambda ws: _read(_write(ws, "yn", y=np.zeros((0, T, 2)))),
         match=r"'/y' has shape \(0, 11, 2\): no trajectory"),
    Case("ext-y-complex", api=lambda ws: _read(_write(ws, "yc", y=_states() + 0j)), match=r"'/y' has dtype complex128"),
    # data near 1e300 would train to NaN: the message is about the data's scale, not the learning rate
    Case("ext-scale-1e300-float32", api=lambda ws: _fit(_write(ws, "big", y=_states() * 1e300), ws),
         match=r"data: .*big.h5: the states reach 9.97e\+299 in magnitude; in float32 the loss squares them .* rescale "
               r"the data"),
    Case("ext-scale-1e300-float64", api=lambda ws: _fit(_write(ws, "big64", y=_states() * 1e300), ws, dtype="float64"),
         match=r"states reach 9.97e\+299 in magnitude; in float64 .*whatever the learning rate"),
    Case("ext-scale-objects", api=lambda ws: _fit_objects(ws, 1e200),
         match=r"train: the given train data: the states reach 9.97e\+199 in magnitude"),
]
