"""``fit`` from objects (a model, Trajectories or window tensors; no TOML, no data file), what the callback
sees (the model, the validation-rollout score), and the tracking sinks of ``logger``."""

from __future__ import annotations

import csv
import math
import sys
import types

import numpy as np
import pytest
import torch

from vpintegrator import VPIntegratorError
from vpintegrator.data import windows
from vpintegrator.data.trajectories import Trajectories
from vpintegrator.data.windows import load_trajectories
from vpintegrator.models import build_model, load_model
from vpintegrator.training import FitResult, TrainConfig, fit

pytestmark = pytest.mark.usefixtures("one_thread")

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}
KW = dict(epochs=2, batch_size=32, lr=3e-3, dtype="float64", device="cpu", seed=5, init_scale=0.1)


def _same(a, b) -> None:
    assert [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in a.history] == \
           [{k: v for k, v in r.items() if k not in ("seconds", "cpu_seconds")} for r in b.history]
    for k, v in a.model.state_dict().items():
        assert torch.equal(v, b.model.state_dict()[k]), k


class Shift(torch.nn.Module):
    """A user module (not from the registry): x ↦ x + W x + b per state."""

    dim, seq_len = 3, 2

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)
        torch.nn.init.zeros_(self.lin.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.lin(x)


def test_trajectories_in_equal_the_data_file(tiny_data, tmp_path):
    """Trajectories (split by val_fraction and seed) train exactly as the file they came from."""
    from_file = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "file"), monitor="val_rollout",
                         val_rollout_steps=10, **KW))
    objects = fit(model=MODEL, train=load_trajectories([tiny_data]), monitor="val_rollout", val_rollout_steps=10, **KW)
    assert objects.run_dir is None
    _same(objects, from_file)


def test_window_tensors_in_equal_the_data_file(tiny_data, tmp_path):
    """The windows themselves, in the data set's order, train exactly as the file (no validation or test split)."""
    from_file = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "file"), val_fraction=0.0,
                         test_fraction=0.0, **KW))
    y = windows.states_tensor(load_trajectories([tiny_data]), "float64")
    ds = windows.WindowDataset(y, 2, 2)
    x, target = ds.batch(torch.arange(len(ds)))
    objects = fit(model=MODEL, train=(x, target.numpy()), **KW)
    _same(objects, from_file)
    assert math.isnan(objects.val_loss)


def test_out_none_writes_nothing_and_out_writes_a_loadable_run(tiny_data, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    traj = load_trajectories([tiny_data])
    fit(model="vpt", train=traj, val=traj.select(traj=[0, 1]), **KW)
    assert list(tmp_path.iterdir()) == []
    result = fit(model=build_model("vpt", dim=3, seq_len=2, L=1), train=traj, out="run", **KW)
    run = tmp_path / "run"
    assert result.run_dir == run.resolve()
    assert {"config.toml", "log.csv", "summary.json", "best.pt", "last.pt"} <= {p.name for p in run.iterdir()}
    assert len(list(csv.DictReader(open(run / "log.csv")))) == 2
    loaded = load_model(run / "last.pt")
    for k, v in loaded.state_dict().items():
        assert torch.equal(v, result.model.state_dict()[k])
    with pytest.raises(VPIntegratorError, match=r"resume .*trained from objects"):  # no data files to continue from
        fit(resume=run, epochs=3)


def test_a_run_from_objects_resumes_given_them_again(tiny_data, tmp_path):
    traj = load_trajectories([tiny_data])
    whole = fit(model=MODEL, train=traj, out=str(tmp_path / "whole"), **(KW | {"epochs": 4}))
    part = fit(model=MODEL, train=traj, out=str(tmp_path / "part"), callback=lambda info: info.epoch >= 2,
               **(KW | {"epochs": 4}))
    assert part.epochs == 2 and part.stopped == "callback"
    resumed = fit(model=MODEL, train=traj, resume=tmp_path / "part")  # the run's config.toml; the same objects
    _same(resumed, whole)
    with pytest.raises(VPIntegratorError, match=r"resume .*: cannot change lr of a run"):
        fit(model=MODEL, train=traj, resume=tmp_path / "part", lr=1.0)


@pytest.mark.parametrize("loss, power", [("relative", 0.5), ("relative_squared", 1.0)])
def test_judge_start_logs_the_initial_weights_as_epoch_0_by_the_loss(loss, power):
    torch.manual_seed(0)
    x, val = torch.randn(40, 2, 3, dtype=torch.float64), torch.randn(20, 2, 3, dtype=torch.float64)
    module = Shift().double()
    with torch.no_grad():
        module.lin.bias.fill_(0.5)  # not the identity: a loss to see
        ref = (float(((module(val) - 2 * val) ** 2).sum() / ((2 * val) ** 2).sum())) ** power  # target 2x
    result = fit(model=module, train=(x, 2 * x), val=(val, 2 * val), loss=loss, judge_start=True,
                 **(KW | {"init_scale": 1.0}))
    assert [r["epoch"] for r in result.history] == [0, 1, 2] and math.isnan(result.history[0]["train_loss"])
    assert result.history[0]["val_loss"] == pytest.approx(ref, rel=1e-12)
    assert result.history[1]["val_loss"] < ref and result.best_epoch > 0


def test_a_user_module_trains_in_place(tiny_data):
    traj = load_trajectories([tiny_data])
    module = Shift()
    result = fit(model=module, train=traj, **(KW | {"epochs": 4, "lr": 1e-2, "init_scale": 1.0}))
    assert result.model is module and module.lin.weight.dtype == torch.float64
    assert result.history[-1]["train_loss"] < result.history[0]["train_loss"]
    assert result.n_params == 12


def test_an_ensemble_of_registry_models_from_objects(tiny_data):
    ens = fit(model=MODEL, train=load_trajectories([tiny_data]), ensemble=2, **KW)
    assert isinstance(ens, FitResult) and ens.is_ensemble and ens.run_dir is None and len(ens.members) == 2


def test_one_result_type_a_run_and_an_ensemble(tiny_data):
    """A single run and an ensemble both give a FitResult: the ensemble's with its members and selection,
    its per-run fields those of its reference member (FitResult.of_ensemble builds one from members)."""
    traj = load_trajectories([tiny_data])
    one = fit(model=MODEL, train=traj, **KW)
    assert type(one) is FitResult and one.members == [] and one.seeds == [] and one.selected is None
    assert one.table == [] and not one.is_ensemble and one.runs == [one] and one.best is one
    ens = fit(model=MODEL, train=traj, ensemble=2, **KW)
    assert isinstance(ens, FitResult) and ens.is_ensemble and ens.runs == ens.members
    assert all(type(m) is FitResult and not m.members for m in ens.members)
    assert len(ens.seeds) == 2 and [row["member"] for row in ens.table] == [0, 1]
    assert ens.selected is not None and ens.best is ens.members[ens.selected]  # validation data: one is selected
    ref = ens.members[ens.selected]
    assert ens.model is ref.model and (ens.epochs, ens.steps, ens.best_loss) == (ref.epochs, ref.steps, ref.best_loss)
    assert ens.best_path is None and "members=2" in repr(ens)
    built = FitResult.of_ensemble(run_dir=None, seeds=ens.seeds, members=ens.members, selected=None, monitor="val_loss",
                                  stopped="epochs", wall_time=1.0, device="cpu", dtype="float64")
    assert type(built) is FitResult and built.model is ens.members[0].model and built.best is None


def test_a_configs_data_files_are_replaced_by_the_objects(tiny_data, tmp_path):
    """A config (e.g. a shipped recipe) with data files: the train object is the data, the files are not read."""
    recipe = dict(data=[str(tmp_path / "absent.h5")], model=MODEL, **KW)
    a = fit(recipe, train=load_trajectories([tiny_data]))
    b = fit(model=MODEL, train=load_trajectories([tiny_data]), **KW)
    _same(a, b)


@pytest.mark.parametrize("call, match", [
    (lambda d: fit(model=MODEL, train="data.h5", **KW), r"train must be a Trajectories or a pair"),
    (lambda d: fit(model=MODEL, train=(torch.zeros(4, 2, 3), torch.zeros(5, 2, 3)), **KW),
     r"train has 4 input and 5 target windows"),
    (lambda d: fit(model=MODEL, train=(torch.zeros(4, 3, 3), torch.zeros(4, 2, 3)), **KW),
     r"train windows are \(4, 3, 3\) -> \(4, 2, 3\), but the model takes \(n, 2, 3\) -> \(n, 2, 3\)"),
    (lambda d: fit(model=MODEL, train=(torch.zeros(4, 2), torch.zeros(4, 2)), **KW), r"train's x must be a 3-d"),
    (lambda d: fit(model=MODEL, train=d, val=Trajectories(y=np.zeros((2, 16, 2)), t=np.arange(16) * 0.2), **KW),
     r"train has dim = 3 but val has dim = 2"),
    (lambda d: fit(model=torch.nn.Linear(3, 3), train=d, **KW), r"model Linear needs an integer attribute dim"),
    (lambda d: fit(model=Shift(), train=d, ensemble=2, **KW), r"give the model by name"),
    (lambda d: fit(model=MODEL, train=(torch.zeros(4, 2, 3), torch.zeros(4, 2, 3)), monitor="val_rollout",
                   val=(torch.zeros(4, 2, 3), torch.zeros(4, 2, 3)), **KW), r"give val as Trajectories"),
    (lambda d: fit(model=MODEL, train=d, resume="somewhere"), r"resume somewhere: not a run directory"),
    (lambda d: fit(model=MODEL, train=d, data=["f.h5"], **KW), r"either as files \(data\) or as train/val objects"),
    (lambda d: fit(model=MODEL, val=d, **KW), r"give train"),
])
def test_bad_objects_are_one_line_errors(tiny_data, tmp_path, monkeypatch, call, match):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(VPIntegratorError, match=match) as info:
        call(load_trajectories([tiny_data]))
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_callback_sees_the_model_and_the_rollout_score(tiny_data, tmp_path):
    seen = []

    def callback(info):
        seen.append((info, {k: v.clone() for k, v in info.model.state_dict().items()}))

    result = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), monitor="val_rollout",
                      val_rollout_steps=10, **KW), callback=callback)
    rows = list(csv.DictReader(open(tmp_path / "run" / "log.csv")))
    assert [i.val_rollout for i, _ in seen] == [float(r["val_rollout"]) for r in rows]
    assert seen[-1][0].model is result.model
    best = torch.load(tmp_path / "run" / "best.pt", weights_only=True)
    for k, v in seen[best["epoch"] - 1][1].items():  # the weights the callback saw at the best epoch
        assert torch.equal(v, best["state_dict"][k])
    # without that monitor the score is NaN; EpochInfo keeps its positional fields
    info = []
    fit(model=MODEL, train=load_trajectories([tiny_data]), callback=info.append, **KW)
    assert math.isnan(info[0].val_rollout)
    assert (info[0].epoch, info[0].member) == (1, 0)


def test_an_ensembles_callback_gets_each_members_model(tiny_data):
    seen = []
    ens = fit(model=MODEL, train=load_trajectories([tiny_data]), seeds=[5, 8], callback=seen.append, **KW)
    last = seen[-1]
    assert [i.member for i in last] == [0, 1]
    for info, member in zip(last, ens.members):
        for k, v in info.model.state_dict().items():
            assert torch.equal(v, member.model.state_dict()[k])


# -- logger sinks -------------------------------------------------------------------------------------------


def test_logger_is_validated():
    with pytest.raises(VPIntegratorError, match=r"logger must be 'none' or 'tensorboard' or 'mlflow'") as info:
        TrainConfig.from_dict(dict(data=["x.h5"], model={"name": "vpt"}, logger="wandb")).validate()
    assert info.value.key == "logger"


def test_a_missing_extra_is_named(tiny_data, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "mlflow", None)  # import mlflow raises ImportError
    with pytest.raises(VPIntegratorError, match=r"logger = 'mlflow' needs the mlflow package; install it with "
                                                r"pip install 'vpintegrator\[mlflow\]'"):
        fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), logger="mlflow", **KW))
    assert not (tmp_path / "run").exists()


def test_tensorboard_sink_writes_the_log_rows(tiny_data, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), monitor="val_rollout", val_rollout_steps=10,
             logger="tensorboard", **KW))
    rows = list(csv.DictReader(open(tmp_path / "run" / "log.csv")))
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    for key in ("train_loss", "val_loss", "lr", "val_rollout"):
        scalars = events.Scalars(key)
        assert [s.step for s in scalars] == [1, 2]
        np.testing.assert_allclose([s.value for s in scalars], [float(r[key]) for r in rows], rtol=1e-6)


def test_tensorboard_needs_a_run_directory(tiny_data):
    pytest.importorskip("tensorboard")
    with pytest.raises(VPIntegratorError, match=r"logger = 'tensorboard' writes into the run directory"):
        fit(model=MODEL, train=load_trajectories([tiny_data]), logger="tensorboard", **KW)


class _FakeClient:
    runs: dict = {}

    def create_experiment(self, name):
        return "exp-" + name

    def create_run(self, experiment_id, run_name=None):
        run_id = f"run{len(self.runs)}"
        self.runs[run_id] = {"experiment": experiment_id, "name": run_name, "params": {}, "metrics": [],
                             "terminated": False}
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=run_id))

    def log_param(self, run_id, key, value):
        self.runs[run_id]["params"][key] = value

    def log_metric(self, run_id, key, value, step):
        self.runs[run_id]["metrics"].append((key, value, step))

    def set_terminated(self, run_id):
        self.runs[run_id]["terminated"] = True

    def set_tag(self, run_id, key, value):
        self.runs[run_id].setdefault("tags", {})[key] = value

    def log_artifact(self, run_id, local_path, artifact_path=None):
        self.runs[run_id].setdefault("artifacts", []).append(local_path)


def test_mlflow_sink_logs_each_member_to_a_run_of_its_own(tiny_data, tmp_path, monkeypatch):
    fake = types.ModuleType("mlflow")
    fake.tracking = types.SimpleNamespace(MlflowClient=_FakeClient)
    fake.get_experiment_by_name = lambda name: None
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _FakeClient.runs = {}
    ens = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "ens"), seeds=[5, 8], logger="mlflow", **KW))
    runs = _FakeClient.runs
    assert sorted(r["name"] for r in runs.values()) == ["member_0_seed_5", "member_1_seed_8"]
    for seed, member in zip(ens.seeds, ens.members):
        run = next(r for r in runs.values() if r["name"] == member.run_dir.name)
        assert run["terminated"] and run["experiment"] == "exp-vpintegrator" and run["params"]["seed"] == str(seed)
        for key in ("train_loss", "val_loss", "lr"):
            assert [(v, s) for k, v, s in run["metrics"] if k == key] == [(r[key], r["epoch"]) for r in member.history]
