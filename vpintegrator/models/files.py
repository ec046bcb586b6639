"""Model files: ``save_model``, ``load_model``, ``load_checkpoint``, pretrained models, GML weight files.

Format: one ``torch.save`` dict ``{"format": "vpintegrator-model", "version": 1, "config": {...},
"state_dict": {...}, "vpintegrator_version": "...", "provenance": {...}, **extra}``, loadable with
``torch.load(weights_only=True)`` (no pickled code). ``load_model("gml:FILE.h5")`` reads GeometricMachineLearning.jl weights instead
(``vpintegrator.models.gml``). A whole pickled object (``torch.save(model)``) written by an earlier version,
whose pickle names a module that has since gone, loads with [`load_pickled`][vpintegrator.models.load_pickled]
through the one table of moved modules, ``MOVED_MODULES``.
"""

from __future__ import annotations

import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from .._io import atomic_path
from .._shipped import PRETRAINED_DIR, pretrained_names, pretrained_records
from .._outputs import check_output, output_lock
from .._version import __version__
from ..errors import VPIntegratorError
from ..provenance import provenance_record
from .gml import GML_PREFIX, parse_gml_spec, read_gml
from .registry import build_model, buildable

__all__ = ["save_model", "load_model", "load_checkpoint", "list_pretrained", "pretrained_info", "read_torch_file",
           "weights_sha256", "MOVED_MODULES", "load_pickled"]

MODEL_FORMAT = "vpintegrator-model"
MODEL_FORMAT_VERSION = 1
PRETRAINED_PREFIX = "pretrained:"
_RESERVED_KEYS = ("format", "version", "config", "state_dict", "vpintegrator_version")

#: The one table of moved modules and names: a module path (or ``"module:Name"``) that pickles written by an
#: earlier version may name -> where those objects live now. The package keeps no old import paths (0.1.0
#: promises none); this table is read only by [`load_pickled`][vpintegrator.models.load_pickled]'s unpickler.
#: Add a row when a module or class whose objects can be pickled (layers, activations, models, results) goes.
MOVED_MODULES: dict[str, str] = {
    "vpintegrator.training.results:EnsembleResult": "vpintegrator.training.results:FitResult",
    "vpintegrator.nn._common": "vpintegrator.nn.common",
    "vpintegrator.models._common": "vpintegrator.models.registry",
    "vpintegrator.models.sizes": "vpintegrator.models.registry",
    "vpintegrator.training.unroll": "vpintegrator.training.single",
    "vpintegrator.training.guards": "vpintegrator.training.loop",
    "vpintegrator.training.progress": "vpintegrator.training.loop",
    "vpintegrator.training.names": "vpintegrator.training.config",
}


class _MovedUnpickler(pickle.Unpickler):
    """``pickle.Unpickler`` that reads a moved module's (or class's) objects from where they are now
    (``MOVED_MODULES``)."""

    def find_class(self, module: str, name: str) -> Any:
        moved = MOVED_MODULES.get(f"{module}:{name}")
        if moved is not None:
            module, _, name = moved.partition(":")
        return super().find_class(MOVED_MODULES.get(module, module), name)


class _MovedPickle:
    """The ``pickle_module`` ``torch.load`` is given: ``pickle`` with the moved-module unpickler."""

    Unpickler = _MovedUnpickler
    __name__ = "vpintegrator.models.files._MovedPickle"

    @staticmethod
    def load(file: Any, **kwargs: Any) -> Any:
        return _MovedUnpickler(file, **kwargs).load()


def load_pickled(file: str | os.PathLike[str], map_location: Any = "cpu") -> Any:
    """``torch.load(file, weights_only=False)`` of a whole pickled object (``torch.save(model)``), with the
    module paths of ``MOVED_MODULES`` read from where those objects live now.

    This runs the file's pickled code: only for files you trust. Files written by
    [`save_model`][vpintegrator.models.save_model] and ``vp-train`` hold no code and load with
    [`load_model`][vpintegrator.models.load_model] instead.

    Parameters
    ----------
    file : path-like
        A file written by ``torch.save(obj)``.
    map_location : default "cpu"
        ``torch.load``'s ``map_location``.
    """
    file = Path(file)
    if not file.is_file():
        raise VPIntegratorError(f"pickled file {file}: not found (or not a regular file); give a file written by "
                                "torch.save")
    return torch.load(file, map_location=map_location, weights_only=False, pickle_module=_MovedPickle)


def save_model(model: nn.Module, path: str | os.PathLike[str], extra: dict[str, Any] | None = None, *,
               overwrite: bool = False, any_module: bool = False,
               state_dict: dict[str, torch.Tensor] | None = None) -> Path:
    """Write ``model`` (config + state_dict) atomically to ``path``.

    Parameters
    ----------
    model : nn.Module
        A model built by [`build_model`][vpintegrator.models.build_model] (it has ``config``; a class outside
        the package records its import path as ``model_class``, so that ``load_model`` imports it again).
    path : path-like
        Target file, conventionally ``*.pt``.
    extra : dict, optional
        More entries for the file (training state: optimizer, epoch, ...); values must be loadable with
        ``torch.load(weights_only=True)`` (tensors, numbers, strings, lists, dicts). Keys must not be one of
        ``format, version, config, state_dict, vpintegrator_version``. A model read from a GML file
        (``gml_provenance`` attribute) also records ``"gml_provenance"``: the source file. ``"provenance"``
        ([`vpintegrator.provenance.provenance_record`][vpintegrator.provenance.provenance_record]: versions, git commit, command line, input files
        with their sha256) defaults to a record of this process without inputs.
    overwrite : bool, default False
        Replace an existing checkpoint at ``path`` (anything else there is never replaced); the file is
        locked against other writers while written.
    any_module : bool, default False
        Also write a module that is not a registry model (``fit`` of a user's own module): its config is
        its own ``config`` dict, if any, with ``"name"`` (default the class name) and ``"module"``
        (``"package.module.Class"``), and only [`load_model`][vpintegrator.models.load_model] with
        ``into=`` reads its weights back.
    state_dict : dict, optional
        The weights to write instead of ``model``'s own, with the same keys (``best.pt``: the best epoch's
        copy beside the live model, which is neither copied nor changed).

    Returns
    -------
    Path
        The file written.
    """
    config = getattr(model, "config", None)
    if any_module and not buildable(config):
        cls = type(model)
        own = config if isinstance(config, dict) else {}
        config = {**own, "name": str(own.get("name") or cls.__name__), "module": f"{cls.__module__}.{cls.__qualname__}"}
    if not isinstance(config, dict) or not buildable(config) and not any_module:
        raise VPIntegratorError(
            f"save_model: model {type(model).__name__} has no registry config; build it with build_model()"
        )
    own = model.state_dict()
    if state_dict is not None and set(state_dict) != set(own):
        raise VPIntegratorError(f"save_model: state_dict's keys are not model {type(model).__name__}'s; give "
                                "the state_dict of this architecture")
    extra = dict(extra or {})
    clash = [k for k in extra if k in _RESERVED_KEYS]
    if clash:
        raise VPIntegratorError(f"save_model: extra key {clash[0]!r} is reserved; rename it")
    gml_source = getattr(model, "gml_provenance", None)
    if isinstance(gml_source, str):
        from ..provenance import redact_path

        extra.setdefault("gml_provenance", redact_path(gml_source))  # no absolute path of this machine
    if "provenance" not in extra:  # how the file was made (vp-train passes its run's, with the data's hashes)
        extra["provenance"] = provenance_record()
    payload = {
        "format": MODEL_FORMAT,
        "version": MODEL_FORMAT_VERSION,
        "config": dict(config),
        "state_dict": own if state_dict is None else state_dict,
        "vpintegrator_version": __version__,
        **extra,
    }
    path = Path(path)
    with output_lock(check_output(path, "checkpoint", overwrite, key=None), key=None):
        with atomic_path(check_output(path, "checkpoint", overwrite, key=None), suffix=".pt") as tmp:
            torch.save(payload, tmp)
    return path


def list_pretrained() -> list[str]:
    """Names usable as ``load_model("pretrained:<name>")`` (files ``vpintegrator/pretrained/<name>.pt``); what
    each was trained on: [`pretrained_info`][vpintegrator.models.pretrained_info]."""
    return pretrained_names(PRETRAINED_DIR)


#: the keys of ``pretrained_info``'s dict, in order
PRETRAINED_INFO_KEYS = ("name", "file", "model", "n_params", "dt", "system", "system_params", "parametric",
                        "observation", "data",
                        "split", "recipe", "metrics", "selection", "weights_sha256")


def pretrained_info(name: str) -> dict[str, Any]:
    """What the shipped pretrained model ``name`` is, was trained on and reaches (torchvision's ``Weights.meta``),
    read from ``vpintegrator/pretrained/provenance.json`` without loading or building the model.

    Parameters
    ----------
    name : str
        One of [`list_pretrained`][vpintegrator.models.list_pretrained] (a leading ``"pretrained:"`` is accepted).

    Returns
    -------
    dict
        A fresh dict with the keys

        - ``name``, ``file``: the name and its ``.pt`` file name;
        - ``model``: the architecture's config (``build_model(**model)``), ``n_params``: its parameter count;
        - ``dt``, ``system``, ``system_params``, ``parametric``: the training data's step, system and parameters
          (the same record the ``.pt`` file carries: ``vp-rollout`` refuses the model on data of another step
          unless ``allow_dt_mismatch``, or of another system or parameters);
        - ``observation``: what the model saw of the state (``vpintegrator.data.observation``'s record: spec,
          matrix, names), None for the whole state; ``vp-rollout`` refuses another observation;
        - ``data``: the training data (``spec``, ``command``: the ``vp-gen`` command, ``description``);
        - ``split``: the trajectory split (``seed``, ``val_fraction``, ``test_fraction``, ``n_traj``,
          ``n_train``, ``n_val``, ``n_test``; the index lists are in the ``.pt`` file,
          ``load_model(...).training_split``);
        - ``recipe``: the training config (a shipped config's name, ``vp-train NAME`` from any install) and the
          command that trains it on the file ``data``'s command writes;
        - ``metrics``: what it reaches on held-out conditions, with the ``protocol`` and the ``command`` that
          measures it;
        - ``selection``: how it was chosen among seeds (``rule``, ``seed``, ``monitor``, ``best_val``,
          ``val_by_seed``, ``best_epoch``, ``wall_time``, ``study``);
        - ``weights_sha256``: [`weights_sha256`][vpintegrator.models.weights_sha256] of its state_dict.

        A key the metadata lacks is ``None``.
    """
    text = str(name)
    text = text[len(PRETRAINED_PREFIX):] if text.startswith(PRETRAINED_PREFIX) else text
    available = list_pretrained()
    if text not in available:
        from ..config import did_you_mean

        shipped = ", ".join(available) if available else "none are shipped with this install"
        raise VPIntegratorError(f"pretrained_info: no pretrained model {text!r}{did_you_mean(text, available)}; "
                                f"available: {shipped}", key="name")
    import copy

    records = pretrained_records(PRETRAINED_DIR)
    entry = copy.deepcopy(records.get(text, {}))
    trained = entry.get("trained_on", {}) or {}
    split = dict(trained.get("split", {}) or {})
    selection = {k: entry.get(k) for k in ("seed", "monitor", "best_val", "val_by_seed", "best_epoch", "wall_time",
                                            "study", "source")}
    rule = entry.get("rule")
    selection["rule"] = rule if rule is not None else _PRETRAINED_RULE
    return {
        "name": text,
        "file": entry.get("file", f"{text}.pt"),
        "model": entry.get("model"),
        "n_params": entry.get("n_params"),
        "dt": trained.get("dt"),
        "system": trained.get("system"),
        "system_params": trained.get("system_params"),
        "parametric": trained.get("parametric"),
        "observation": trained.get("observation"),
        "data": trained.get("data"),
        "split": split or None,
        "recipe": entry.get("recipe"),
        "metrics": entry.get("metrics"),
        "selection": selection,
        "weights_sha256": entry.get("weights_sha256"),
    }


#: provenance.json's rule of choosing the shipped seed
_PRETRAINED_RULE = "lowest validation score (summary.json best_loss) over seeds"


def weights_sha256(state_dict: dict[str, Any]) -> str:
    """A digest of a state_dict's tensors: per key in sorted order, the key, dtype, shape and the bytes of the
    tensor (on the CPU, contiguous). Equal digests mean bit-identical weights, whatever else a file holds."""
    import hashlib

    digest = hashlib.sha256()
    for key in sorted(state_dict):
        value = state_dict[key]
        digest.update(key.encode())
        if isinstance(value, torch.Tensor):
            t = value.detach().cpu().contiguous()
            digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
            digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
        else:
            digest.update(repr(value).encode())
    return digest.hexdigest()


def _resolve_model_path(path: str | os.PathLike[str]) -> Path:
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith(PRETRAINED_PREFIX):
        name = text[len(PRETRAINED_PREFIX) :]
        available = list_pretrained()
        if name not in available:
            shipped = ", ".join(available) if available else "none are shipped with this install"
            raise VPIntegratorError(f"model {text!r}: no pretrained model {name!r}; available: {shipped}")
        return PRETRAINED_DIR / f"{name}.pt"
    p = Path(text)
    if p.is_dir():
        for candidate in ("best.pt", "last.pt"):
            if (p / candidate).exists() and not (p / candidate).is_file():  # never another file in its place
                raise VPIntegratorError(
                    f"model path {p}: its {candidate} is not a regular file ({_special(p / candidate)}); a run "
                    f"directory's {candidate} is a .pt file written by vp-train: move that away")
            if (p / candidate).is_file():
                return p / candidate
        raise VPIntegratorError(f"model path {p}: a directory without best.pt or last.pt; pass a run directory or a .pt file")
    if not p.exists():
        raise _MissingFile(f"model file {p} does not exist; give a .pt file, a run directory or pretrained:<name>")
    return p


def _special(p: Path) -> str:
    """What the non-regular file ``p`` is, in words."""
    import stat

    mode = p.stat().st_mode
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else
            "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else
            "not a regular file")


class _MissingFile(VPIntegratorError, FileNotFoundError):
    """A missing model file: a one-line [`VPIntegratorError`][vpintegrator.errors.VPIntegratorError] that is also a ``FileNotFoundError``."""


_ZIP_MAGIC = b"PK\x03\x04"


def read_torch_file(file: str | os.PathLike[str], map_location: Any = "cpu", what: str = "model file") -> Any:
    """``torch.load(file, weights_only=True)`` with one-line errors naming ``file`` (never runs pickled code).

    Empty, truncated, HDF5, text and foreign (code-carrying) files each get a message saying what was
    expected instead of torch's multi-line traceback.
    """
    file = Path(file)
    if file.is_dir():
        raise VPIntegratorError(f"{what} {file}: is a directory; expected a .pt file written by vpintegrator")
    if file.exists() and not file.is_file():  # a FIFO would wait forever for a writer
        raise VPIntegratorError(f"{what} {file}: is not a regular file ({_special(file)}); expected a .pt file "
                                "written by vpintegrator")
    with open(file, "rb") as f:
        head = f.read(8)
    if not head:
        raise VPIntegratorError(f"{what} {file}: empty file; expected a .pt file written by vpintegrator")
    if head.startswith(b"\x89HDF"):
        raise VPIntegratorError(
            f"{what} {file}: an HDF5 file (data or rollout), not a torch checkpoint; give a .pt file or a run directory"
        )
    try:
        with warnings.catch_warnings():  # e.g. "Detected pickle protocol 4": the error below says it all
            warnings.simplefilter("ignore")
            return torch.load(file, map_location=map_location, weights_only=True)
    except Exception as err:  # unpickling errors have many types; report them uniformly
        text = str(err).lower()
        foreign = "unsupported global" in text or ("unsupported operand" in text and head[:1] == b"\x80")  # a pickle
        if isinstance(err, pickle.UnpicklingError) and foreign:
            reason = ("refused by torch.load(weights_only=True): it holds objects other than tensors and plain "
                      "data (a foreign pickle, possibly code; it was not run)")
        elif head.startswith(_ZIP_MAGIC):
            reason = "truncated or corrupt torch file (its zip archive is incomplete)"
        else:
            first = str(err).split(". ")[0].splitlines()[0] if str(err) else ""
            reason = f"not a torch file ({type(err).__name__}: {first})"
        raise VPIntegratorError(
            f"{what} {file}: {reason}; expected a .pt file written by vpintegrator (vp-train's best.pt / last.pt)"
        ) from None


def load_checkpoint(path: str | os.PathLike[str], map_location: Any = "cpu") -> dict[str, Any]:
    """Read and validate a model file written by [`save_model`][vpintegrator.models.save_model]; return the whole dict.

    ``path`` may be a file, a run directory (``best.pt``, else ``last.pt``), ``"pretrained:<name>"`` or
    ``"gml:FILE.h5"`` (GML weights, read by ``load_model``: the dict of the model it builds, with
    ``gml_provenance`` and without a training record). Loaded with ``torch.load(weights_only=True)``.
    """
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith(GML_PREFIX):  # init_from = "gml:FILE.h5" reads it here
        model = load_model(text, map_location=map_location)
        return {"format": MODEL_FORMAT, "version": MODEL_FORMAT_VERSION, "config": dict(getattr(model, "config")),
                "state_dict": model.state_dict(), "vpintegrator_version": __version__,
                "gml_provenance": str(getattr(model, "gml_provenance", text)), "path": text}
    file = _resolve_model_path(path)
    payload = read_torch_file(file, map_location=map_location, what="model file")
    if not isinstance(payload, dict):
        raise VPIntegratorError(
            f"model file {file}: holds a {type(payload).__name__}, expected a dict written by vpintegrator.save_model "
            "(a .pt file from vp-train's run directory)"
        )
    if payload.get("format") != MODEL_FORMAT:
        raise VPIntegratorError(
            f"model file {file}: not a vpintegrator model (key 'format' should be {MODEL_FORMAT!r}); "
            "write it with vpintegrator.save_model"
        )
    if payload.get("version") != MODEL_FORMAT_VERSION:
        raise VPIntegratorError(
            f"model file {file}: format version {payload.get('version')!r}, this vpintegrator reads "
            f"version {MODEL_FORMAT_VERSION}; upgrade vpintegrator"
        )
    for key in ("config", "state_dict"):
        if not isinstance(payload.get(key), dict):
            raise VPIntegratorError(f"model file {file}: key {key!r} is missing or not a dict")
    _check_run_model(file, payload["config"])
    payload["path"] = str(file)
    return payload


def _check_run_model(file: Path, hparams: dict[str, Any]) -> None:
    """A checkpoint of a run directory (``best.pt``/``last.pt`` beside its ``config.toml``) must hold the
    model family the run trained: another family's file put there would be rolled out under the run's name."""
    toml = file.parent / "config.toml"
    if file.name not in ("best.pt", "last.pt") or not toml.is_file():
        return
    from .._toml import tomllib

    try:
        model = tomllib.loads(toml.read_text(encoding="utf-8")).get("model")
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return  # not a run's config (reading the run reports it)
    name = model.get("name") if isinstance(model, dict) else None
    if isinstance(name, str) and name != hparams.get("name"):
        raise VPIntegratorError(
            f"model file {file}: holds a {hparams.get('name')!r} model, but the run's {toml.name} trained {name!r}; "
            "was it replaced by another run's file? Give that file itself, or the run's own checkpoint")


def load_model(path: str | os.PathLike[str], map_location: Any = "cpu", hparams: dict[str, Any] | None = None,
               into: nn.Module | None = None) -> nn.Module:
    """Rebuild a model from a file written by [`save_model`][vpintegrator.models.save_model], or read GML weights.

    Parameters
    ----------
    path : path-like or str
        A ``.pt`` file, a run directory (uses ``best.pt``, else ``last.pt``), ``"pretrained:<name>"``, or
        ``"gml:FILE.h5"``: an HDF5 weight file written by GeometricMachineLearning.jl (VPFF, VPT or ST; the
        architecture and its sizes are read from the file, see [`read_gml`][vpintegrator.models.read_gml]).
        What the weights cannot tell goes after a ``?`` as ``KEY=VALUE`` pairs joined by ``&``:
        ``"gml:FILE.h5?seq_len=3&name=vpt"`` (keys: ``name``, ``dtype`` (float64, the default, or float32)
        and model keys such as ``seq_len``, ``activation``, ``add_connection``; values are numbers,
        ``true``/``false`` or words). Defaults: seq_len 3 (vpt, st) or 1 (vpff), tanh, no add connection.
    map_location : str or torch.device
        Device to load onto (``torch.load``'s ``map_location``).
    hparams : dict, optional
        The model's hyper-parameters, only with ``"gml:..."``: the same keys as the ``?`` suffix (they win over it). A key the file
        determines (dim, n_blocks, L, n_heads, ...) must agree with it.
    into : nn.Module, optional
        Load the file's weights into this module (its ``load_state_dict``) instead of building one: the way
        to read the ``best.pt``/``last.pt`` of ``fit`` with a user's own module (which ``load_model`` cannot
        build). Returned in eval mode.

    Returns
    -------
    nn.Module
        In eval mode, with the dtype and device of the saved (mapped) state_dict (GML weights: float64
        unless ``dtype=float32``; ``model.gml_provenance`` names the source file). A file written by
        ``vp-train`` also gives ``model.training_split`` (``{"train", "val", "test"}`` trajectory indices) and
        ``model.training_split_data`` (what identifies those trajectories), and ``model.trained_on``
        (``{"dt", "system", "system_params", "parametric", "observation"}`` of its training data; vp-rollout
        checks them; ``observation``: what it saw of the state, ``vpintegrator.data.observation``, None for all;
        ``normalisation``: the coordinates it steps in, ``vpintegrator.models.normalise``, where recorded);
        a model fine-tuned from another (``init_from``) also gives ``model.training_ancestors`` (per ancestor,
        nearest first, ``{"source", "split", "split_data"}``: what it trained on; vp-rollout labels their
        trajectories ``ancestor_seen``);
        older files have none of them. ``model.source_file`` is the file read.
    """
    if not isinstance(path, (str, os.PathLike)) or (isinstance(path, str) and not path.strip()):
        raise VPIntegratorError(f"load_model: path must be a checkpoint file (.pt), a run directory, "
                                f"'pretrained:NAME' or 'gml:FILE.h5'; got {path!r}")
    text = os.fspath(path)
    if isinstance(text, str) and text.startswith(GML_PREFIX):
        file, params = parse_gml_spec(text)
        params.update(hparams or {})
        name = params.pop("name", None)
        dtype = params.pop("dtype", "float64")
        model = read_gml(file, name, dtype=dtype, **params)
        if isinstance(map_location, (str, torch.device)):
            model = model.to(map_location)
        return model.eval()
    if hparams is not None:
        raise VPIntegratorError(
            f"load_model: hparams is only for gml:FILE.h5 weight files; {text} carries its own model "
            "hyper-parameters (drop hparams=)"
        )
    payload = load_checkpoint(path, map_location=map_location)
    file, config, state = payload["path"], dict(payload["config"]), payload["state_dict"]
    if into is not None:
        return _load_into(into, file, state)
    name = config.pop("name", None)
    if isinstance(config.get("module"), str) and not buildable({"name": name, **config}):
        raise VPIntegratorError(
            f"model file {file}: weights of a user module {config['module']} (not a registry model); load them "
            f"with load_model({str(file)!r}, into=<a {name} instance>)")
    try:
        model = build_model(name, **config)
    except VPIntegratorError as err:
        raise VPIntegratorError(f"model file {file}: key 'config' does not build a model ({err})") from err
    floats = [t for t in state.values() if isinstance(t, torch.Tensor) and t.is_floating_point()]
    if floats:
        model = model.to(device=floats[0].device, dtype=floats[0].dtype)
    try:
        model.load_state_dict(state)
    except RuntimeError as err:
        raise VPIntegratorError(
            f"model file {file}: key 'state_dict' does not match config {payload['config']} ({str(err).splitlines()[0]})"
        ) from err
    if isinstance(payload.get("gml_provenance"), str):
        model.gml_provenance = payload["gml_provenance"]
    if isinstance(payload.get("split"), dict):  # vp-train's trajectory split (vp-rollout labels rows by it)
        model.training_split = payload["split"]
        model.training_split_data = payload.get("split_data") if isinstance(payload.get("split_data"), dict) else None
    if isinstance(payload.get("fit_record"), dict):  # a TrainedModel's training (vpintegrator.models.fitted)
        setattr(model, "fit_record", payload["fit_record"])
    if isinstance(payload.get("ancestors"), list):  # fine-tuned (init_from): what the models it started from saw
        setattr(model, "training_ancestors", [a for a in payload["ancestors"] if isinstance(a, dict)])
    trained_on = {k: payload[k] for k in ("dt", "system", "system_params", "parametric", "observation",
                                          "normalisation") if k in payload}
    if "dt" in trained_on or "system" in trained_on:  # vp-train's record of its data (older files have none)
        setattr(model, "trained_on", trained_on)
        from .normalise import model_normalisation

        norm = model_normalisation(model)  # a malformed record: one line here, not at the first rollout
        if norm is not None and norm.dim != int(getattr(model, "dim", norm.dim)):
            raise VPIntegratorError(f"model file {file}: its normalisation has {norm.dim} components, the model "
                                    f"dim {getattr(model, 'dim')}; the file is corrupt: train it again")
    setattr(model, "source_file", str(file))
    return model.eval()


def _load_into(module: nn.Module, file: str, state: dict[str, Any]) -> nn.Module:
    """``load_model(..., into=module)``: the file's weights into ``module`` (its dtype and device)."""
    if not isinstance(module, nn.Module):
        raise VPIntegratorError(f"load_model: into must be a torch.nn.Module; got {type(module).__name__}", key="into")
    try:
        module.load_state_dict(state)
    except RuntimeError as err:
        raise VPIntegratorError(
            f"model file {file}: key 'state_dict' does not fit {type(module).__name__} ({str(err).splitlines()[0]})",
            key="into") from None
    return module.eval()
