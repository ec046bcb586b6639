"""Generation specs: one declarative TOML file per system and protocol (``systems/*.toml``).

A spec names the system and its parameters, the initial-condition sampler, the time grid and the
generator::

    description = "one line shown by `vp-gen --list`"

    [system]
    name = "rigid_body"              # vpintegrator.systems.list_systems()
    # periodic = {0 = 6.283185307179586}   # optional: components that are angles, {index = period} (or dim
    #                                        periods, 0 where not); default the system's own ``periodic``
    inertia = [2.0, 1.0, 0.6666666666666666]   # every other key is a system parameter

    [initial_conditions]
    sampler = "paper_sphere"         # vpintegrator.systems.list_samplers()
    n_traj = 1238                    # optional for "paper_sphere" and "list"
    # every other key is a sampler argument (radius, low, high, points, ...)

    [integration]
    dt = 0.2                         # sample times t = k * dt, k = 0 .. floor(t_end / dt); t0 = 0
    t_end = 20.0
    method = "dop853"                # SciPy DOP853, or any name in vpintegrator.list_integrators()
    rtol = 1e-12                     # DOP853 tolerances (per trajectory)
    atol = 1e-12
    seed = 0                         # numpy.random.default_rng(seed) draws the initial conditions
    chunk_size = 2048                # optional: trajectories integrated and written at a time

    [output]
    path = "datasets/rigid_body_paper.h5"   # optional; default datasets/<spec name>.h5
    compression = "gzip"             # optional: /y's HDF5 filter, "gzip" (default), "lzf" or "none"

    [parameters]                     # optional: system parameters drawn per trajectory
    inertia = { dist = "uniform", low = 0.5, high = 3.0 }   # fixed, uniform, log_uniform, normal, list, grid

(the ``[parameters]`` section: ``vpintegrator.data.param_dists``; a spec with one writes ``/params``).

Specs are found by name in the repository's top-level ``systems/`` directory and in the copy shipped
inside the wheel (``vpintegrator/_specs``), or given as a path to a ``.toml`` file.
"""

from __future__ import annotations

import contextvars
import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from ..config import Config, declared, key
from ..errors import VPIntegratorError

__all__ = ["DOP853", "GenerationSpec", "list_specs", "load_spec"]

#: Method name of SciPy's DOP853 (the reference "exact flow"); every other name is a classical integrator.
DOP853 = "dop853"
DEFAULT_CHUNK_SIZE = 2048

# TOML layout: section -> {key: GenerationSpec field}. [system] and [initial_conditions] also take free
# keys (system parameters, sampler arguments).
_SECTIONS: dict[str, dict[str, str]] = {
    "system": {"name": "system", "periodic": "periodic"},
    "initial_conditions": {"sampler": "sampler", "n_traj": "n_traj"},
    "integration": {
        "dt": "dt",
        "t_end": "t_end",
        "method": "method",
        "rtol": "rtol",
        "atol": "atol",
        "seed": "seed",
        "chunk_size": "chunk_size",
    },
    "output": {"path": "out", "compression": "compression"},
    "parameters": {},
}
#: sections whose every key is free (a system parameter, a sampler argument, a parameter's distribution)
_FREE = {"system": "params", "initial_conditions": "sampler_args", "parameters": "parameters"}
_TOP_KEYS = ("description", *_SECTIONS)
_REQUIRED = {"system": "name", "initial_conditions": "sampler"}
_REQUIRED_INTEGRATION = ("dt", "t_end")
#: Keys accepted as overrides by ``load_spec`` (and as ``vp-gen`` flags).
OVERRIDES = (
    "n_traj", "dt", "t_end", "method", "rtol", "atol", "seed", "chunk_size", "out", "compression", "sampler", "params",
    "periodic", "sampler_args", "parameters",
)
#: /y's HDF5 filter (after shuffle): gzip (readable everywhere, the default), lzf (h5py only) or none. On float64
#: trajectories gzip, its noise bytes stored (data/_parallel.py), is 17 % smaller than none for the least CPU of
#: the filters that compress (scripts/bench_gen_compression.py, docs/benchmarks.md)
COMPRESSIONS = ("gzip", "lzf", "none")
#: Top-level ``--set`` keys: the overrides and the spec's sections (``integration.dt=...``).
SET_KEYS = (*OVERRIDES, *_SECTIONS)
#: Largest seed: it is stored as a 64-bit HDF5 attribute.
MAX_SEED = 2**63 - 1
#: Most steps a time grid may have: t_end / dt must stay an exactly representable count (2**53).
MAX_STEPS = 2**53
_FROM_SPEC = "from the spec"
#: set while ``_apply_overrides`` builds a spec from a checked one and checked changes
_REPLACING: contextvars.ContextVar[bool] = contextvars.ContextVar("vpintegrator_spec_replacing", default=False)
_TABLE = "a table of key = value"
_TOML_KEY = {fld: f"{sec}.{key}" for sec, keys in _SECTIONS.items() for key, fld in keys.items()}


def _spec_dirs() -> list[Path]:
    """Where spec names are looked up: the repository's ``systems/``, then the wheel's ``_specs``."""
    from .._shipped import SPECS, shipped_dirs

    return shipped_dirs(*SPECS)


def _spec_files() -> dict[str, Path]:
    files: dict[str, Path] = {}
    for d in reversed(_spec_dirs()):  # the repository's copy wins over the packaged one
        files.update({p.stem: p for p in sorted(d.glob("*.toml"))})
    return dict(sorted(files.items()))


def list_specs() -> list[str]:
    """Names of the shipped specs (``systems/*.toml``), usable with [`load_spec`][vpintegrator.data.spec.load_spec] and ``vp-gen``."""
    return list(_spec_files())


# ---------------------------------------------------------------------------------------------------
# field checks, shared by TOML values, overrides and direct construction


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def _check_field(name: str, value: Any, where: str) -> Any:
    """Validate one GenerationSpec field; ``where`` names the file/key or override in the message.

    The type and bounds are the field's declaration (``vpintegrator.config.key``); the rules beyond
    them are here."""
    key = name if where == name else None  # an override: the error is about that key (a CLI shows its flag)
    info = declared(GenerationSpec)[name]
    if info.type is not None:
        try:
            value = info.validate(name, value, label=where)
        except VPIntegratorError as err:
            raise VPIntegratorError(str(err), key=key) from None
    if name in ("dt", "t_end", "rtol", "atol"):
        if name == "rtol" and value >= 1:
            raise VPIntegratorError(
                f"{where} must be < 1 (a relative tolerance, e.g. 1e-12); got {value!r}", key=key
            )
        return float(value)
    if name == "seed" and value > MAX_SEED:
        raise VPIntegratorError(
            f"{where} must be an integer >= 0 and < 2**63 (it is stored as a 64-bit attribute); got {value!r}",
            key=key,
        )
    if name in ("system", "sampler", "method", "description", "name"):
        if not isinstance(value, str) or (name != "description" and not value):
            raise VPIntegratorError(f"{where} must be a non-empty string; got {value!r}", key=key)
        return value
    if name == "out":
        if not isinstance(value, (str, os.PathLike)) or (not os.fspath(value) and not where.startswith("Gen")):
            raise VPIntegratorError(f"{where} must be a file path; got {value!r}", key=key)
        return os.fspath(value)
    if name == "sampler_args":
        taken = sorted(set(value) & _SAMPLER_OWN)
        if taken:  # the sampler's own arguments: a table key of that name would be passed twice
            raise VPIntegratorError(
                f"{where}: initial_conditions.{taken[0]} is not a sampler argument "
                + ("(the number of trajectories is initial_conditions.n_traj, e.g. --set initial_conditions.n_traj=4)"
                   if taken[0] == "n" else "(vp-gen sets it: remove it)"), key=key)
    if name in ("params", "sampler_args", "parameters"):
        return dict(value)
    return value


#: what ``sample_initial_conditions`` takes itself: never a key of a spec's [initial_conditions] table
_SAMPLER_OWN = frozenset({"n", "rng", "system"})


def _methods() -> list[str]:
    from ..integrators import list_integrators

    return [DOP853, *list_integrators()]


def _check_method(method: str, where: str) -> None:
    if method == DOP853:  # the default needs no integrator registry (vp-gen's start-up)
        return
    from ..integrators import list_integrators

    valid = [DOP853, *list_integrators()]
    if method not in valid:
        raise VPIntegratorError(
            f"{where}: unknown method {method!r}; valid methods: {', '.join(valid)}",
            key="method" if where == "method" else None,
        )


@dataclass(frozen=True)
class GenerationSpec(Config):
    """What to generate: system, initial conditions, time grid, generator, output.

    Build one with [`load_spec`][vpintegrator.data.spec.load_spec] (from TOML) or directly; ``dataclasses.replace`` re-validates.
    A ``vpintegrator.config.Config`` like the training and rollout configs: each key declared once
    (``key``: type, bounds, help, ``vp-gen`` flag), checked once by ``Config`` when the spec is built (the
    message names the file and its ``section.key``), then the rules between keys (``t_end >= dt``, at most
    2**53 steps).

    Parameters
    ----------
    name : str
        Spec name (the TOML file's stem).
    system : str
        System registry name; ``params`` its parameters (``get_system(system, **params)``).
    periodic : dict, list or None
        The ``[system] periodic`` key: the components that are angles, ``{index = period}`` or ``dim`` periods
        (0 where not periodic); None: the system's own ``periodic`` (``vpintegrator.systems.System``). Recorded
        in the file (``/y``'s attribute ``periodic``); every error, metric and figure wraps those components.
    sampler : str
        Initial-condition sampler name; ``sampler_args`` its arguments.
    n_traj : int or None
        Number of trajectories (overrides the spec). None: the sampler decides, e.g. 1238 for
        "paper_sphere".
    dt : float
        Sampling step: t = k * dt. The sample times are ``t = k * dt`` for ``k = 0 .. n_steps``,
        ``n_steps = floor(t_end / dt)`` (``n_states = n_steps + 1`` samples).
    t_end : float
        Final time (t0 = 0).
    method : str
        'dop853' (SciPy) or a classical integrator, e.g. implicit_midpoint. ``"dop853"`` integrates with
        the tolerances ``rtol``/``atol`` per trajectory, a classical integrator with the fixed step ``dt``.
    rtol : float
        DOP853 relative tolerance (per trajectory).
    atol : float
        DOP853 absolute tolerance (per trajectory).
    seed : int
        Seed for the initial-condition sampler. ``numpy.random.default_rng(seed)`` draws the initial
        conditions (and, by another stream, the per-trajectory parameters).
    parameters : dict
        The ``[parameters]`` section: ``{name: {"dist": ..., ...}}``, parameters drawn per trajectory
        (``vpintegrator.data.param_dists``); empty: one parameter set (``params``) for all.
    chunk_size : int
        Trajectories integrated and written at a time (at most).
    out : str
        Output HDF5 file. Default ``datasets/<name>.h5``.
    compression : str
        The HDF5 filter of ``/y``: ``"gzip"`` (shuffle + deflate, readable everywhere; the default: the
        cheapest that compresses), ``"lzf"`` (shuffle + lzf, h5py only) or ``"none"``. gzip keeps the byte
        planes that are noise (the six low bytes of float64 states) in stored deflate blocks: 17 % smaller
        than none for ~0.25 CPU s per 2*10^4 x 101 x 3 states, less than lzf (``scripts/bench_gen_compression.py``).
    description, source : str
        One-line description; the TOML file it came from ("" if built in Python).
    """

    name: str = key(flag="")
    system: str = key(flag="")
    sampler: str = key(flag="")
    dt: float = key(type=float, low=0, open_low=True, show_default=_FROM_SPEC)
    t_end: float = key(type=float, low=0, open_low=True, show_default=_FROM_SPEC)
    params: dict[str, Any] = key(default_factory=dict, type=dict, expected=_TABLE, flag="")
    periodic: Any = key(None, flag="")
    sampler_args: dict[str, Any] = key(default_factory=dict, type=dict, expected=_TABLE, flag="")
    parameters: dict[str, Any] = key(default_factory=dict, type=dict, expected=_TABLE, flag="")
    n_traj: int | None = key(None, type=int, low=1, optional=True, expected="an integer >= 1",
                             show_default=_FROM_SPEC)
    method: str = key(DOP853, choices=_methods, show_default=_FROM_SPEC)
    rtol: float = key(1e-12, type=float, low=0, open_low=True, show_default=_FROM_SPEC)
    atol: float = key(1e-12, type=float, low=0, open_low=True, show_default=_FROM_SPEC)
    seed: int = key(0, type=int, low=0, expected="an integer >= 0", show_default=_FROM_SPEC)
    chunk_size: int = key(DEFAULT_CHUNK_SIZE, type=int, low=1, expected="an integer >= 1",
                          show_default=_FROM_SPEC)
    out: str = key("", path="file", show_default="from the spec, datasets/<spec>.h5")
    compression: str = key("gzip", type=str, choices=COMPRESSIONS, show_default=_FROM_SPEC)
    description: str = key("", flag="")
    source: str = key("", flag="")

    _source_in_messages: ClassVar[bool] = False  # the messages name the file and key themselves

    def __post_init__(self) -> None:
        # each key checked once: a spec built from a checked one by checked changes (``_REPLACING``) is not
        # checked again; the rules between keys always run
        names = [] if _REPLACING.get() else [n for n in declared(type(self)) if n != "source"]
        self._run_checks(names, self.source)

    def _checked(self, name: str, value: Any, source: str) -> Any:
        """One key checked (its declaration, then the spec's rules), the message naming the file and
        ``section.key`` (or ``GenerationSpec.<key>`` for a spec built in Python)."""
        toml_key = _TOML_KEY.get(name, "description" if name == "description" else None)
        if name == "out" and value == "":
            toml_key = None  # not given: datasets/<name>.h5 (an empty output.path is refused by _parse)
        where = f"{self.source}: key '{toml_key}'" if self.source and toml_key else f"GenerationSpec.{name}"
        return _check_field(name, value, where)

    def _check_together(self) -> None:
        if not self.out:
            object.__setattr__(self, "out", f"datasets/{self.name}.h5")
        where = f"{self.source}: " if self.source else ""
        if self.t_end < self.dt:
            raise VPIntegratorError(
                f"{where}t_end ({self.t_end:g}) must be >= dt ({self.dt:g}); give a longer t_end or a smaller dt"
            )
        ratio = self.t_end / self.dt
        if not math.isfinite(ratio) or ratio > MAX_STEPS:
            raise VPIntegratorError(
                f"{where}too many steps: give a larger dt or a smaller t_end (t_end / dt = {self.t_end:g} / "
                f"{self.dt:g} = {ratio:.3g}, at most {MAX_STEPS:.3g})",
                key="dt",
            )

    def to_toml(self) -> str:
        """This spec as a spec TOML file ([`load_spec`][vpintegrator.data.spec.load_spec] reads it back to an equal spec)."""
        from ..config import dump_toml

        tables = {section: {key: getattr(self, fld) for key, fld in keys.items()} for section, keys in _SECTIONS.items()}
        if self.periodic is None:
            del tables["system"]["periodic"]
        elif isinstance(self.periodic, dict):  # TOML's keys are strings
            tables["system"]["periodic"] = {str(k): v for k, v in self.periodic.items()}
        tables["system"].update(self.params)
        tables["initial_conditions"].update(self.sampler_args)
        tables["parameters"].update(self.parameters)
        if not self.parameters:
            del tables["parameters"]
        return dump_toml({"description": self.description or None, **tables})

    @property
    def n_steps(self) -> int:
        """Number of steps, ``floor(t_end / dt)`` (t_end a multiple of dt up to rounding)."""
        return int(math.floor(self.t_end / self.dt * (1 + 1e-12)))

    @property
    def n_states(self) -> int:
        """Number of sample times, ``n_steps + 1``."""
        return self.n_steps + 1

    @property
    def t(self) -> np.ndarray:
        """Sample times ``k * dt``, shape (n_states,)."""
        return np.arange(self.n_states) * self.dt

    def replace(self, **overrides: Any) -> "GenerationSpec":  # type: ignore[override]
        """A copy with some fields changed (None values are ignored); validated like [`load_spec`][vpintegrator.data.spec.load_spec]."""
        return _apply_overrides(self, overrides)


# ---------------------------------------------------------------------------------------------------
# loading


def _resolve(name_or_path: str | os.PathLike[str]) -> Path:
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise VPIntegratorError(
            f"spec must be a spec name or a path to a .toml file (or a GenerationSpec); got {name_or_path!r}"
        )
    text = os.fspath(name_or_path)
    if isinstance(text, bytes):
        text = os.fsdecode(text)
    path = Path(text)
    if path.is_dir():
        raise VPIntegratorError(f"spec file {text!r} is a directory; give a .toml file or a spec name")
    if path.suffix == ".toml" or os.sep in text or "/" in text or path.is_file():
        if not path.is_file():
            raise VPIntegratorError(
                f"spec file {text!r} not found; give an existing .toml file or a spec name "
                f"({', '.join(list_specs()) or 'none found'})"
            )
        return path
    files = _spec_files()
    if text not in files:
        where = ", ".join(str(d) for d in _spec_dirs()) or "no spec directory found"
        raise VPIntegratorError(
            f"unknown spec {text!r}; valid specs: {', '.join(files) or '(none)'} (in {where}), "
            "or give a path to a .toml file"
        )
    return files[text]


def _read_toml(path: Path) -> dict[str, Any]:
    from ..config import read_toml

    return read_toml(path, what="spec")


def _parse(path: Path, data: dict[str, Any]) -> dict[str, Any]:
    """TOML tables -> GenerationSpec keyword arguments, checking the keys and tables, naming file and key (the
    values are checked once, by GenerationSpec)."""
    for key in data:
        if key not in _TOP_KEYS:
            raise VPIntegratorError(
                f"{path}: unknown key {key!r}; valid top-level keys: {', '.join(_TOP_KEYS)}"
            )
    kwargs: dict[str, Any] = {"name": path.stem, "source": str(path)}  # values checked by GenerationSpec
    if "description" in data:
        kwargs["description"] = data["description"]
    for section, keys in _SECTIONS.items():
        table = data.get(section)
        if table is None:
            if section in _REQUIRED or section == "integration":
                raise VPIntegratorError(f"{path}: missing table [{section}]; for an example: vp-gen rigid_body --print-config")
            continue
        if not isinstance(table, dict):
            raise VPIntegratorError(f"{path}: key {section!r} must be a table [{section}]; got {table!r}")
        free: dict[str, Any] = {}
        for key, value in table.items():
            if key in keys:
                if keys[key] == "out" and value == "":
                    raise VPIntegratorError(f"{path}: key '{section}.{key}' must be a file path; got ''")
                kwargs[keys[key]] = value
            elif section in _FREE:
                free[key] = value
            else:
                raise VPIntegratorError(
                    f"{path}: unknown key '{section}.{key}'; valid keys in [{section}]: {', '.join(keys)}"
                )
        if section in _REQUIRED and _REQUIRED[section] not in table:
            raise VPIntegratorError(f"{path}: missing key '{section}.{_REQUIRED[section]}'")
        if section == "integration":
            for key in _REQUIRED_INTEGRATION:
                if key not in table:
                    raise VPIntegratorError(f"{path}: missing key 'integration.{key}'")
        if section in _FREE:
            kwargs[_FREE[section]] = free
    return kwargs


def _check_names(spec: GenerationSpec) -> None:
    """Check the system (and its parameters), the sampler name and the method against the registries."""
    from ..systems import get_system, list_samplers

    where = spec.source or f"spec {spec.name!r}"
    try:
        get_system(spec.system, **spec.params)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"{where}: [system] {err}") from None
    except TypeError as err:  # a parameter of the wrong type
        raise VPIntegratorError(f"{where}: [system] bad parameter: {err}") from None
    spec_periods(spec.periodic, where, get_system(spec.system, **spec.params))
    if spec.parameters:
        from .param_dists import check_parameters

        check_parameters(get_system(spec.system, **spec.params), spec.parameters, f"{where}: [parameters]")
    if spec.sampler not in list_samplers():
        raise VPIntegratorError(
            f"{where}: key 'initial_conditions.sampler': unknown sampler {spec.sampler!r}; valid samplers: "
            f"{', '.join(list_samplers())}"
        )
    _check_method(spec.method, f"{where}: key 'integration.method'")


def spec_periods(periodic: Any, where: str, system: Any) -> np.ndarray:
    """Each component's period (dim,), 0 where not periodic: a spec's ``[system] periodic`` (None: the system's own);
    a bad declaration is a one-line error naming ``where`` and the key (``vpintegrator.data.trajectories.state_periods``)."""
    from .trajectories import state_periods

    given = None if periodic is None else {"periodic": periodic, "source": where}
    return state_periods(system, system.dim, given, key="key 'system.periodic'")


def _apply_overrides(spec: GenerationSpec, overrides: dict[str, Any]) -> GenerationSpec:
    changes: dict[str, Any] = {}
    for key, value in overrides.items():
        if key not in OVERRIDES:
            raise VPIntegratorError(f"unknown override {key!r}; valid overrides: {', '.join(OVERRIDES)}")
        if value is None:
            continue
        value = _check_field(key, value, key)
        changes[key] = ({**getattr(spec, key), **value} if key in ("params", "sampler_args", "parameters")
                        else value)  # tables merge
    if not changes:
        return spec
    if "method" in changes:
        _check_method(changes["method"], "method")
    token = _REPLACING.set(True)  # the changes were checked above, the other fields when spec was built
    try:
        new = dataclasses.replace(spec, **changes)
    except VPIntegratorError as err:
        given = ", ".join(f"{k}={v}" for k, v in changes.items())
        raise VPIntegratorError(f"{err} (after overrides {given})", key=err.key) from None
    finally:
        _REPLACING.reset(token)
    if {"params", "sampler", "parameters", "periodic"} & set(changes):
        _check_names(new)
    return new


def spec_overrides_from_set(values: dict[str, Any]) -> dict[str, Any]:
    """``--set`` entries (``vpintegrator.config.parse_set``) as [`load_spec`][vpintegrator.data.spec.load_spec] overrides.

    Accepts the override keys (``dt=0.1``), their TOML names (``integration.dt=0.1``,
    ``output.path=x.h5``, ``initial_conditions.n_traj=10``), system parameters (``system.inertia=[1, 2, 3]``)
    and sampler arguments (``initial_conditions.radius=2``).
    """
    out: dict[str, Any] = {}
    for key, value in values.items():
        if key in _SECTIONS and isinstance(value, dict):
            fields = _SECTIONS[key]
            for sub, v in value.items():
                if key == "system" and sub == "name":
                    raise VPIntegratorError(
                        "set: 'system.name' cannot be changed by an override (the system's parameters come "
                        "with it); use or write a spec for that system",
                        key="set",
                    )
                if sub in fields:
                    out[fields[sub]] = v
                elif key == "system":
                    out.setdefault("params", {})[sub] = v
                elif key == "initial_conditions":
                    out.setdefault("sampler_args", {})[sub] = v
                elif key == "parameters":
                    out.setdefault("parameters", {})[sub] = v
                else:
                    raise VPIntegratorError(
                        f"set: unknown key '{key}.{sub}'; valid keys in [{key}]: {', '.join(fields)}", key="set"
                    )
        elif key in OVERRIDES:
            out[key] = value
        else:
            raise VPIntegratorError(
                f"set: unknown key {key!r}; valid: {', '.join(OVERRIDES[:-2])}, system.<parameter>, "
                "initial_conditions.<argument>, or a spec's section.key",
                key="set",
            )
    return out


def load_spec(name_or_path: str | os.PathLike[str], **overrides: Any) -> GenerationSpec:
    """Load a generation spec by name (``list_specs()``) or from a TOML file, then apply overrides.

    Parameters
    ----------
    name_or_path : str or PathLike
        A spec name such as ``"rigid_body_paper"``, a path to a ``.toml`` file, or ``"dysts:NAME"`` (a flow of dysts,
        the optional extra: ``vpintegrator.systems.dysts.default_spec``).
    **overrides
        Any of ``n_traj, dt, t_end, method, rtol, atol, seed, chunk_size, out, compression``; None values are ignored
        (so CLI flags can be passed straight through).

    Returns
    -------
    GenerationSpec

    Raises
    ------
    VPIntegratorError
        Unknown spec name (listing the valid ones), malformed TOML, unknown keys, wrong types, dt <= 0,
        unknown system, parameter, sampler or method; the message names the file and key.
    """
    from ..systems.dysts import default_spec, is_dysts_name

    if is_dysts_name(name_or_path):  # a dysts flow by name: its default spec (vpintegrator.systems.dysts)
        spec = GenerationSpec(**default_spec(str(name_or_path)))
    else:
        path = _resolve(name_or_path)
        spec = GenerationSpec(**_parse(path, _read_toml(path)))
    _check_names(spec)
    return _apply_overrides(spec, overrides)
