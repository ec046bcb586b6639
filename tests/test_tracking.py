"""Tracking sinks (issue 33, item 6): TensorBoard gets the config as hyperparameters and as text; MLflow
gets tags, the config as flat parameters and the run's files as artifacts; setting a sink up is not
counted in ``wall_time``. mlflow is not a dependency: a fake module stands in for it."""

from __future__ import annotations

import json
import sys
import time
import types

import pytest

from vpintegrator.errors import VPIntegratorError
from vpintegrator.training import fit
from vpintegrator.training.sinks import flat_params

MODEL = {"name": "vpt", "seq_len": 2, "L": 1, "n_blocks": 1}
KW = dict(epochs=2, batch_size=32, lr=3e-3, dtype="float64", device="cpu", seed=5, init_scale=0.1)


def test_flat_params_dot_tables_and_keep_numbers():
    flat = flat_params({"lr": 0.1, "model": {"name": "vpt", "n_blocks": 2}, "betas": [0.9, 0.99], "x": None})
    assert flat == {"lr": 0.1, "model.name": "vpt", "model.n_blocks": 2, "betas": "[0.9, 0.99]"}


def test_tensorboard_gets_hparams_and_the_config_text(tiny_data, tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), logger="tensorboard", **KW))
    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"), size_guidance={"tensors": 0})
    events.Reload()
    content = events.PluginTagToContent("hparams")
    start = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/session_start_info"])
    hp = start.session_start_info.hparams
    assert hp["lr"].number_value == pytest.approx(3e-3) and hp["model.name"].string_value == "vpt"
    assert hp["model.n_blocks"].number_value == 1 and hp["seed"].number_value == 5
    experiment = plugin_data_pb2.HParamsPluginData.FromString(content["_hparams_/experiment"])
    assert {m.name.tag for m in experiment.experiment.metric_infos} >= {"train_loss", "val_loss"}
    text = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert "lr = 0.003" in text and 'name = "vpt"' in text
    assert [s.step for s in events.Scalars("train_loss")] == [1, 2]


class _Client:
    runs: dict = {}
    setup_seconds = 0.0

    def __init__(self):
        time.sleep(self.setup_seconds)  # a slow tracking server

    def create_experiment(self, name):
        return "exp-" + name

    def create_run(self, experiment_id, run_name=None):
        run_id = f"run{len(self.runs)}"
        self.runs[run_id] = {"name": run_name, "params": {}, "tags": {}, "artifacts": [], "metrics": []}
        return types.SimpleNamespace(info=types.SimpleNamespace(run_id=run_id))

    def set_tag(self, run_id, key, value):
        self.runs[run_id]["tags"][key] = value

    def log_param(self, run_id, key, value):
        self.runs[run_id]["params"][key] = value

    def log_metric(self, run_id, key, value, step):
        self.runs[run_id]["metrics"].append((key, value, step))

    def log_artifact(self, run_id, local_path, artifact_path=None):
        with open(local_path, "rb") as f:  # the file as it is when the run ends
            self.runs[run_id]["artifacts"].append((local_path, f.read()))

    def set_terminated(self, run_id):
        self.runs[run_id]["terminated"] = True

    def get_run(self, run_id):
        return types.SimpleNamespace(data=types.SimpleNamespace(params=dict(self.runs[run_id]["params"])))


@pytest.fixture
def fake_mlflow(monkeypatch):
    fake = types.ModuleType("mlflow")
    fake.tracking = types.SimpleNamespace(MlflowClient=_Client)
    fake.get_experiment_by_name = lambda name: None
    monkeypatch.setitem(sys.modules, "mlflow", fake)
    _Client.runs, _Client.setup_seconds = {}, 0.0
    return _Client


def test_mlflow_gets_tags_flat_params_and_artifacts(tiny_data, tmp_path, fake_mlflow):
    import torch

    from vpintegrator import __version__

    run_dir = tmp_path / "run"
    fit(dict(data=[tiny_data], model=MODEL, out=str(run_dir), logger="mlflow", **KW))
    (run,) = fake_mlflow.runs.values()
    assert run["terminated"]
    assert run["tags"]["vpintegrator.version"] == __version__ and run["tags"]["torch.version"] == str(torch.__version__)
    assert "numpy.version" in run["tags"] and "python.version" in run["tags"]
    assert run["params"]["model.n_blocks"] == "1" and run["params"]["lr"] == "0.003" and "model" not in run["params"]
    files = {p.rsplit("/", 1)[-1]: blob for p, blob in run["artifacts"]}
    assert set(files) == {"config.toml", "summary.json", "best.pt"}
    assert files["summary.json"] == (run_dir / "summary.json").read_bytes()  # the final summary
    assert json.loads(files["summary.json"])["stopped"] == "epochs"


def _open_run(fake, experiment_id="exp-mine"):
    """What ``mlflow.start_run()`` does to the fake: a run of the user's, made active."""
    run_id = fake().create_run(experiment_id, run_name="mine").info.run_id
    return types.SimpleNamespace(info=types.SimpleNamespace(run_id=run_id, experiment_id=experiment_id))


def test_mlflow_logs_into_the_run_the_user_opened_and_leaves_it_open(tiny_data, tmp_path, fake_mlflow):
    """``with mlflow.start_run(): fit(...)``: the metrics, parameters and artifacts go to the user's run (as
    mlflow.autolog does), no run of the package's is made, and the user's run is not ended."""
    mine = _open_run(fake_mlflow)
    sys.modules["mlflow"].active_run = lambda: mine
    result = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), logger="mlflow", **KW))
    assert list(fake_mlflow.runs) == [mine.info.run_id]
    run = fake_mlflow.runs[mine.info.run_id]
    assert "terminated" not in run
    assert [(v, s) for k, v, s in run["metrics"] if k == "train_loss"] == [
        (r["train_loss"], r["epoch"]) for r in result.history]
    assert run["params"]["lr"] == "0.003" and {p.rsplit("/", 1)[-1] for p, _ in run["artifacts"]} == {
        "config.toml", "summary.json", "best.pt"}
    # a second fit with another lr in the same run: parameters are written once in MLflow; one line says what to do
    with pytest.raises(VPIntegratorError, match=r"^logger = 'mlflow': the active MLflow run already has the "
                       r"parameter lr = '0.003', this fit has '0.001'; open a run per fit") as info:
        fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run2"), logger="mlflow", **{**KW, "lr": 1e-3}))
    assert "\n" not in str(info.value)


def test_mlflow_ensemble_members_are_child_runs_of_the_users_run(tiny_data, tmp_path, fake_mlflow):
    mine = _open_run(fake_mlflow)
    sys.modules["mlflow"].active_run = lambda: mine
    fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "ens"), seeds=[5, 8], logger="mlflow", **KW))
    children = {k: r for k, r in fake_mlflow.runs.items() if k != mine.info.run_id}
    assert sorted(r["name"] for r in children.values()) == ["member_0_seed_5", "member_1_seed_8"]
    for run in children.values():
        assert run["tags"]["mlflow.parentRunId"] == mine.info.run_id and run["terminated"]
        assert {k for k, _, _ in run["metrics"]} >= {"train_loss", "val_loss"}
    assert "terminated" not in fake_mlflow.runs[mine.info.run_id]


def test_real_mlflow_active_run_gets_the_fit(tiny_data, tmp_path, monkeypatch):
    """The same with MLflow itself (skipped where it is not installed: it is an extra, not a dependency)."""
    mlflow = pytest.importorskip("mlflow")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow 3: the file store without a database
    mlflow.set_tracking_uri((tmp_path / "mlruns").as_uri())
    with mlflow.start_run() as mine:
        fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), logger="mlflow", **KW))
        assert mlflow.active_run().info.run_id == mine.info.run_id  # left open
    client = mlflow.tracking.MlflowClient()
    run = client.get_run(mine.info.run_id)
    assert run.data.params["lr"] == "0.003" and "train_loss" in run.data.metrics
    assert len(client.search_runs([mine.info.experiment_id])) == 1  # no run of the package's
    with mlflow.start_run() as parent:
        fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "ens"), seeds=[5, 8], logger="mlflow", **KW))
        with pytest.raises(VPIntegratorError, match="already has the parameter lr"):  # the user's run got params
            mlflow.log_param("lr", "0.1")
            fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run3"), logger="mlflow", **KW))
    children = [r for r in client.search_runs([mine.info.experiment_id])
                if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert sorted(r.info.run_name for r in children) == ["member_0_seed_5", "member_1_seed_8"]
    assert all(r.info.status == "FINISHED" and "train_loss" in r.data.metrics for r in children)


def test_sink_set_up_is_not_in_wall_time(tiny_data, tmp_path, fake_mlflow):
    fake_mlflow.setup_seconds = 3.0
    t0 = time.perf_counter()
    result = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), logger="mlflow", **KW))
    assert time.perf_counter() - t0 >= 3.0
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["wall_time"] < 3.0 and result.wall_time < 3.0


class Collector:
    """A user's own logger: the sink methods, nothing else (what a W&B wrapper would be)."""

    def __init__(self) -> None:
        self.rows: list[dict] = []
        self.closed = 0

    def log(self, row):
        self.rows.append(dict(row))

    def close(self):
        self.closed += 1


def test_a_sink_object_gets_every_row_and_is_closed_once(tiny_data, tmp_path):
    import csv

    mine, rows_only = Collector(), types.SimpleNamespace(rows=[])
    rows_only.log = rows_only.rows.append  # log alone (no close) is enough
    result = fit(dict(data=[tiny_data], model=MODEL, out=str(tmp_path / "run"), **KW), logger=[mine, rows_only])
    assert [r["epoch"] for r in mine.rows] == [1, 2] == [r["epoch"] for r in rows_only.rows]
    with open(tmp_path / "run" / "log.csv") as f:
        logged = list(csv.DictReader(f))
    assert [float(r["train_loss"]) for r in logged] == pytest.approx([r["train_loss"] for r in mine.rows])
    assert mine.closed == 1 and result.epochs == 2
    ens = Collector()  # an ensemble: one object, each member's rows with member and seed
    fit(dict(data=[tiny_data], model=MODEL, **KW), ensemble=2, logger=ens)
    assert sorted({(r["member"], r["seed"]) for r in ens.rows}) == [(0, 5), (1, 6)] and ens.closed == 1


@pytest.mark.parametrize("bad", [object(), [Collector(), 3]])
def test_a_sink_object_without_log_is_one_line(bad, tiny_data):
    from vpintegrator import VPIntegratorError

    with pytest.raises(VPIntegratorError, match=r"logger must be .* an object with a log\(row\) method") as info:
        fit(dict(data=[tiny_data], model=MODEL, **KW), logger=bad)
    assert info.value.key == "logger"
