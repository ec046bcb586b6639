"""Bad inputs to the SINDy API (``vpintegrator.rollout.sindy``: ``fit_sindy``, ``select_sindy``, ``SindyStep``,
``derivatives``; issue 58): every argument, size and pysindy/scikit-learn error checked at the package's
boundary, one line naming the argument (ids ``sindy-``). Skipped cases need pysindy (the ``sindy`` extra)."""

import numpy as np

from bad_inputs import Case

H = 0.2


def _ps():
    import pytest

    return pytest.importorskip("pysindy")


def _traj(n: int = 6, seed: int = 0) -> np.ndarray:
    from vpintegrator.data import solve_flow
    from vpintegrator.systems import RigidBody

    rng = np.random.default_rng(seed)
    y0 = rng.normal(size=(n, 3))
    y0 /= np.linalg.norm(y0, axis=1, keepdims=True)
    return solve_flow(RigidBody(), y0, H * np.arange(21))


def _z():
    rng = np.random.default_rng(1)
    z = rng.normal(size=(50, 3))
    return z, z[:, [1, 2, 0]]


def _fit(library="poly2", threshold=0.01, **kw):
    _ps()
    from vpintegrator.rollout.sindy import fit_sindy

    z, zdot = kw.pop("data", _z())
    return fit_sindy(z, zdot, library, threshold, **kw)


def _select(**kw):
    _ps()
    from vpintegrator.rollout.sindy import select_sindy

    train = kw.pop("train", _traj())
    val = kw.pop("val", _traj(2, seed=5))
    return select_sindy(train, val, kw.pop("dt", H), kw.pop("integrator", "rk4"), **kw)


def _step(**kw):
    _ps()
    from vpintegrator.rollout import SindyStep

    return SindyStep(kw.pop("train", _traj()), kw.pop("val", _traj(2, seed=5)), "rk4", H, **kw)


def _with(a: np.ndarray, at: tuple, value: float) -> np.ndarray:
    a = np.array(a)
    a[at] = value
    return a


def _optimizer(**attrs):
    """A pysindy optimizer whose attributes were set past its constructor's checks (as a user's code might)."""
    opt = _ps().STLSQ()
    for k, v in attrs.items():
        setattr(opt, k, v)
    return opt


CASES = [
    Case("sindy-threshold-nan", api=lambda ws: _fit(threshold=float("nan")),
         match=r"SINDy threshold must be a finite number >= 0; got nan"),
    Case("sindy-threshold-negative", api=lambda ws: _fit(threshold=-0.1), match=r"threshold must be .*>= 0; got -0.1"),
    Case("sindy-threshold-bool", api=lambda ws: _fit(threshold=True), match=r"threshold must be"),
    Case("sindy-thresholds-nan-in-grid", api=lambda ws: _select(thresholds=[0.01, float("nan")]),
         match=r"SINDy threshold must be a finite number >= 0; got nan"),
    Case("sindy-thresholds-empty", api=lambda ws: _select(thresholds=[]), match=r"SINDy thresholds is empty"),
    Case("sindy-thresholds-repeated", api=lambda ws: _select(thresholds=[0.01, 0.01]),
         match=r"SINDy thresholds: 0.01 is given twice"),
    Case("sindy-libraries-empty", api=lambda ws: _select(libraries=[]), match=r"SINDy libraries is empty"),
    Case("sindy-libraries-repeated", api=lambda ws: _select(libraries=["poly2", "poly2"]),
         match=r"SINDy libraries: 'poly2' is given twice; give each once"),
    Case("sindy-library-no-features", api=lambda ws: _fit(library=_ps().PolynomialLibrary(degree=0, include_bias=False)),
         match=r"SINDy library PolynomialLibrary\(degree=0, include_bias=False\): it has no features"),
    Case("sindy-library-degree-60-name", api=lambda ws: _fit(library="poly60"),
         match=r"SINDy library 'poly60': 39711 features on 3 state components, more than MAX_FEATURES"),
    Case("sindy-library-degree-60-pysindy", api=lambda ws: _select(libraries=[_ps().PolynomialLibrary(degree=60)]),
         match=r"PolynomialLibrary\(degree=60\): 39711 features"),
    Case("sindy-library-degree-60-wide", api=lambda ws: _fit(library="poly60", data=(np.zeros((4, 40)), np.zeros((4, 40)))),
         match=r"'poly60': \d+ features on 40 state components"),
    Case("sindy-library-custom", api=lambda ws: _fit(library=_ps().CustomLibrary([lambda x: x])),
         match=r"a CustomLibrary cannot be written as an analytic field"),
    Case("sindy-library-fourier-2", api=lambda ws: _fit(library=_ps().FourierLibrary(n_frequencies=2)),
         match=r"only n_frequencies=1"),
    Case("sindy-library-not-a-library", api=lambda ws: _fit(library=3), match=r"SINDy library 3: give a name"),
    Case("sindy-library-bad-name", api=lambda ws: _step(libraries=["poly2", "cubic"]), match=r"parts are polyD"),
    Case("sindy-train-nan", api=lambda ws: _select(train=_with(_traj(), (2, 4, 1), np.nan)),
         match=r"SINDy training trajectories hold NaN at \[2, 4, 1\]"),
    Case("sindy-val-inf", api=lambda ws: _select(val=_with(_traj(2, 5), (1, 3, 0), np.inf)),
         match=r"SINDy validation trajectories hold Inf at \[1, 3, 0\]"),
    Case("sindy-step-train-nan", api=lambda ws: _step(train=_with(_traj(), (0, 0, 0), np.nan)),
         match=r"training trajectories hold NaN at \[0, 0, 0\]"),
    Case("sindy-fit-z-nan", api=lambda ws: _fit(data=(_with(_z()[0], (3, 2), np.nan), _z()[1])),
         match=r"SINDy states z hold NaN at \[3, 2\]"),
    Case("sindy-fit-shapes", api=lambda ws: _fit(data=(_z()[0], _z()[1][:10])),
         match=r"zdot must have the shape of z \(50, 3\); got \(10, 3\)"),
    Case("sindy-val-wrong-dim", api=lambda ws: _select(val=_traj(2)[..., :2]),
         match=r"validation trajectories must be \(n, T, 3\)"),
    Case("sindy-dt-nan", api=lambda ws: _select(dt=float("nan")), match=r"dt \(the step size\) must be a finite number > 0"),
    Case("sindy-derivatives-too-short", api=lambda ws: (_ps(), __import__("vpintegrator.rollout.sindy", fromlist=["x"])
                                                        .derivatives(np.zeros((2, 2, 3)), H)),
         match=r"trajectories of 2 states give no central difference"),
    Case("sindy-optimizer-class", api=lambda ws: _fit(optimizer=_ps().STLSQ),
         match=r"give a pysindy optimizer object"),
    Case("sindy-optimizer-not-pysindy", api=lambda ws: _fit(optimizer=object()),
         match=r"SINDy optimizer <object object.*give a pysindy optimizer object"),
    Case("sindy-optimizer-threshold-nan", api=lambda ws: _step(optimizer=_optimizer(threshold=float("nan"))),
         match=r"SINDy optimizer STLSQ\(.*\): SINDy threshold must be a finite number >= 0; got nan"),
    Case("sindy-optimizer-fit-raises", api=lambda ws: _fit(optimizer=_ps().STLSQ(initial_guess=np.zeros((2, 2))),
                                                         threshold=None),
         match=r"SINDy fit of library poly2 \(as configured\) by STLSQ failed: ValueError: initial_guess shape"),
    Case("sindy-optimizer-no-threshold", api=lambda ws: _select(optimizer=_ps().SR3(), thresholds=[0.1]),
         match=r"the optimizer SR3 has no threshold; leave thresholds out"),
    Case("sindy-threshold-none-without-optimizer", api=lambda ws: _fit(threshold=None),
         match=r"threshold must be a finite number >= 0; got None"),
    Case("sindy-component-names-length", api=lambda ws: _step(component_names=("a", "b")),
         match=r"component_names has 2 names for 3 components"),
]
