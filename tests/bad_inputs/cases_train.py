"""Bad inputs to vp-train (``train-``) and the training / model Python API (``model-``)."""

from __future__ import annotations

import shutil
from pathlib import Path

from bad_inputs import Case

C = ["{config}"]
OUT = ["--out", "{out}/r"]


def _train(*args, match, exit_code=1, id):
    return Case(id, "vp-train", list(args), match, exit_code)


def _api(id, fn, match):
    return Case(id, None, [], match, 1, fn)


# -- helpers for API cases (everything they write goes under {out}, which is not hashed) -------------------


def _run_copy(ws, name="r2") -> Path:
    from vpintegrator.training import TrainConfig

    dst = Path(ws.out) / name
    shutil.copytree(ws.run, dst)
    # the copy is not beside the data: its config.toml names the data by absolute path, as older runs did
    (dst / "config.toml").write_text(TrainConfig.from_toml(Path(ws.run) / "config.toml").to_toml())
    return dst


def _resume_with_last(ws, source: str):
    from vpintegrator.training import fit

    run = _run_copy(ws)
    shutil.copy(source, run / "last.pt")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    try:
        fit(resume=run, epochs=4)
    finally:
        after = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
        assert after == before, "the run directory changed on an error"


def _other_arch_pt(ws) -> Path:
    import torch

    from vpintegrator.models import build_model

    payload = torch.load(Path(ws.run) / "last.pt", weights_only=True)
    payload["state_dict"] = build_model("vpt", dim=3, seq_len=3, n_blocks=2, L=3).state_dict()
    path = Path(ws.out) / "other.pt"
    torch.save(payload, path)
    return path


def _wrong_config_pt(ws) -> Path:
    import torch

    payload = torch.load(ws.model, weights_only=True)
    payload["config"] = {**payload["config"], "L": 5}
    path = Path(ws.out) / "wrong.pt"
    torch.save(payload, path)
    return path


def _fit(ws, **kw):
    from vpintegrator.training import fit

    base = dict(data=[ws.data], model={"name": "vpt", "seq_len": 3, "n_blocks": 1, "L": 2}, epochs=2,
                batch_size=32, dtype="float64", device="cpu", out=str(Path(ws.out) / "f"))
    return fit({**base, **kw})


def _tc(**kw):
    from vpintegrator.training import TrainConfig

    return TrainConfig.from_dict({"data": ["x.h5"], "model": "vpt", **kw})


def _load(path):
    from vpintegrator.models import load_model

    return load_model(path)


CASES = [
    # -- absurd numbers ----------------------------------------------------------------------------------
    _train(*C, "--lr", "nan", *OUT, id="train-lr-nan", match=r"--lr must be a finite number > 0; got nan"),
    _train(*C, "--lr", "inf", *OUT, id="train-lr-inf", match=r"--lr must be a finite number > 0; got inf"),
    _train(*C, "--lr", "0", *OUT, id="train-lr-zero", match=r"--lr must be a finite number > 0"),
    _train(*C, "--lr", "-1e-3", *OUT, id="train-lr-negative", match=r"--lr must be a finite number > 0"),
    _train(*C, "--lr-min", "nan", *OUT, id="train-lr-min-nan", match=r"--lr-min must be a finite number in"),
    _train(*C, "--val-rollout-error", "median", *OUT, id="train-val-rollout-error-unknown",
           match=r"--val-rollout-error"),
    _train(*C, "--monitor", "val_rollout", "--val-rollout-drift-weight", "-1", *OUT,
           id="train-val-rollout-drift-weight-negative", match=r"--val-rollout-drift-weight must be a number >= 0"),
    _train(*C, "--monitor", "val_loss", "--val-rollout-drift-weight", "5", *OUT,
           id="train-val-rollout-drift-weight-without-monitor", match=r"--val-rollout-drift-weight = 5.0 shapes the "
           r"validation-rollout score, which monitor = 'val_loss' does not compute"),
    _train(*C, "--lr-min", "1", "--lr", "0.1", *OUT, id="train-lr-min-above-lr", match=r"--lr-min must be"),
    _train(*C, "--epochs", "0", *OUT, id="train-epochs-zero", match=r"--epochs must be a positive integer; got 0"),
    _train(*C, "--epochs", "-3", *OUT, id="train-epochs-negative", match=r"--epochs must be a positive integer"),
    _train(*C, "--batch-size", "0", *OUT, id="train-batch-size-zero", match=r"--batch-size must be a positive integer"),
    _train(*C, "--batch-size", "-8", *OUT, id="train-batch-size-negative", match=r"--batch-size must be a positive"),
    _train(*C, "--time-limit", "-1", *OUT, id="train-time-limit-negative", match=r"--time-limit must be a finite"),
    _train(*C, "--time-limit", "0", *OUT, id="train-time-limit-zero", match=r"--time-limit must be a finite"),
    _train(*C, "--time-limit", "nan", *OUT, id="train-time-limit-nan", match=r"--time-limit must be a finite"),
    _train(*C, "--time-limit", "inf", *OUT, id="train-time-limit-inf", match=r"--time-limit must be a finite"),
    _train(*C, "--val-fraction", "1", *OUT, id="train-val-fraction-one", match=r"--val-fraction must be a number in \[0, 1\)"),
    _train(*C, "--val-fraction", "-0.1", *OUT, id="train-val-fraction-negative", match=r"--val-fraction must be"),
    _train(*C, "--val-fraction", "nan", *OUT, id="train-val-fraction-nan", match=r"--val-fraction must be"),
    _train(*C, "--test-fraction", "1", *OUT, id="train-test-fraction-one", match=r"--test-fraction must be a number in \[0, 1\)"),
    _train(*C, "--test-fraction", "-0.1", *OUT, id="train-test-fraction-negative", match=r"--test-fraction must be"),
    _train(*C, "--test-fraction", "0.5", "--val-fraction", "0.5", *OUT, id="train-test-plus-val-fraction-one",
           match=r"--test-fraction = 0\.5 and val_fraction = 0\.5 hold out every trajectory \(their sum must be below 1"),
    _train(*C, "--test-fraction", "0.45", "--val-fraction", "0.45", *OUT, id="train-test-val-leave-no-training",
           match=r"leave none for training; lower test_fraction"),
    _train(*C, "--seed", "-1", *OUT, id="train-seed-negative", match=r"--seed must be a non-negative integer"),
    _train(*C, "--patience", "-1", *OUT, id="train-patience-negative", match=r"--patience must be a non-negative"),
    _train(*C, "--lm-windows", "0", *OUT, id="train-lm-windows-zero", match=r"--lm-windows must be a positive"),
    _train(*C, "--lm-iters-per-epoch", "0", *OUT, id="train-lm-iters-zero", match=r"--lm-iters-per-epoch must be"),
    _train(*C, "--lm-resample-every", "-2", *OUT, id="train-lm-resample-negative", match=r"--lm-resample-every must"),
    _train(*C, "--lm-lambda", "nan", *OUT, id="train-lm-lambda-nan", match=r"--lm-lambda must be a finite number > 0"),
    _train(*C, "--lm-lambda", "inf", *OUT, id="train-lm-lambda-inf", match=r"--lm-lambda must be a finite number > 0"),
    _train(*C, "--val-rollout-steps", "0", *OUT, id="train-val-rollout-steps-zero", match=r"--val-rollout-steps must"),
    _train(*C, "--seq-len", "0", *OUT, id="train-seq-len-zero", match=r"model config for 'vpt': seq_len: expected an integer >= 1, got 0"),
    _train(*C, "--set", "init_scale=nan", *OUT, id="train-set-init-scale-nan", match=r"init_scale must be a finite"),
    _train(*C, "--set", "init_scale=inf", *OUT, id="train-set-init-scale-inf", match=r"init_scale must be a finite"),
    _train(*C, "--set", "min_delta=nan", *OUT, id="train-set-min-delta-nan", match=r"min_delta must be a finite"),
    _train(*C, "--set", "decay_epochs=inf", *OUT, id="train-set-decay-epochs-inf", match=r"decay_epochs must be a finite"),
    _train(*C, "--set", "stride=0", *OUT, id="train-set-stride-zero", match=r"stride must be a positive integer"),
    _train(*C, "--set", "checkpoint_every=0", *OUT, id="train-set-checkpoint-every-zero", match=r"checkpoint_every must"),
    _train(*C, "--set", "checkpoint_seconds=-5", *OUT, id="train-set-checkpoint-seconds-negative",
           match=r"checkpoint_seconds must be a finite number > 0"),
    _train(*C, "--set", "checkpoint_seconds=nan", *OUT, id="train-set-checkpoint-seconds-nan",
           match=r"checkpoint_seconds must be a finite number > 0"),
    _train(*C, "--set", "lm_check_windows=-1", *OUT, id="train-set-lm-check-windows-negative", match=r"lm_check_windows"),
    _train(*C, "--set", "model.L=0", *OUT, id="train-set-model-L-zero", match=r"model config for 'vpt': L: expected an integer >= 1, got 0"),
    _train(*C, "--set", "model.n_blocks=1.5", *OUT, id="train-set-model-n-blocks-float", match=r"n_blocks: expected an integer >= 0, got 1.5"),
    _train(*C, "--set", "model.dim=nan", *OUT, id="train-set-model-dim-nan", match=r"dim: expected an integer >= 1, got nan"),
    _train(*C, "--set", "model.skew_sym=false", "--set", "model.symmetric=true", *OUT, id="train-set-model-symmetric-arbitrary",
           match=r"model config for 'vpt': symmetric: the palindrome needs each attention's explicit inverse, which only skew_sym=true has"),
    # -- bad --set -----------------------------------------------------------------------------------------
    _train(*C, "--set", "learning_rate=1e-3", *OUT, id="train-set-unknown-key", match=r"--set: unknown key 'learning_rate'"),
    _train(*C, "--set", "epochs=\"two\"", *OUT, id="train-set-wrong-type", match=r"epochs must be a positive integer; got 'two'"),
    _train(*C, "--set", "epochs=true", *OUT, id="train-set-bool", match=r"epochs must be a positive integer; got True"),
    _train(*C, "--set", "lr", *OUT, id="train-set-no-equals", match=r"--set: 'lr' is not KEY=VALUE"),
    _train(*C, "--set", "optimizer_kwargs=3", *OUT, id="train-set-optimizer-kwargs-not-table", match=r"optimizer_kwargs must be a table"),
    _train(*C, "--set", "optimizer_kwargs={{momentun=0.9}}", "--optimizer", "sgd", *OUT, id="train-set-optimizer-kwargs-unknown",
           match=r"optimizer_kwargs"),
    _train(*C, "--set", "model.foo=1", *OUT, id="train-set-model-unknown-key", match=r"unknown key 'foo'"),
    # sizes that cannot fit: refused before a model is built, the key and the estimate named (issue 36)
    _train(*C, "--set", "model.n_blocks=100000000", *OUT, id="train-set-model-huge-n-blocks",
           match=r"training model 'vpt' with model.n_blocks = 100000000 \(.* parameters.*\) needs about .* of memory "
                 r".*give a smaller model.n_blocks"),
    _train(*C, "--set", "model.L=100000000", *OUT, id="train-set-model-huge-L",
           match=r"model.L = 100000000 .* needs about .*give a smaller model.L"),
    _train("--data", "{data}", "--model", "lpnet", "--epochs", "1", "--set", "model.width=1000000", "--set",
           "model.n_layers=100000", *OUT, id="train-set-model-huge-width-and-layers",
           match=r"model.n_layers = 100000, model.width = 1000000 .* needs about"),
    _train(*C, "--lr", "0.1", "--set", "lr=0.2", *OUT, id="train-set-and-flag", match=r"also given by its own flag"),
    # -- names -----------------------------------------------------------------------------------------------
    _train("--data", "{data}", "--model", "vpx", "--epochs", "1", *OUT, id="train-model-unknown",
           match=r"unknown model 'vpx'.*did you mean 'vpt'"),
    _train(*C, "--optimizer", "adamm", *OUT, id="train-optimizer-unknown", match=r"unknown optimizer 'adamm'.*did you mean 'adam"),
    _train(*C, "--scheduler", "cosin", *OUT, id="train-scheduler-unknown", match=r"unknown scheduler 'cosin'.*did you mean 'cosine'"),
    _train(*C, "--device", "tpu", *OUT, id="train-device-unknown", match=r"device"),
    _train("--model", "vpt", *OUT, id="train-no-data", match=r"without CONFIG.toml give at least --data"),
    # -- outputs ---------------------------------------------------------------------------------------------
    _train(*C, "--data", "{data}", "--out", "{data}", id="train-out-is-data", match=r"--out .*data.h5 is the input file"),
    _train(*C, "--out", "{config}", id="train-out-is-config", match=r"--out .*config.toml is the input file"),
    _train(*C, "--out", "{text}", id="train-out-is-file", match=r"--out .*notes.txt: exists and is not a directory"),
    _train(*C, "--out", "{ws}", id="train-out-nonrun-dir", match=r"--out .*: a directory that is not empty and holds no run"),
    _train(*C, "--out", "{run}", id="train-out-existing-run", match=r"--out .*run: already holds a run"),
    # -- configs ---------------------------------------------------------------------------------------------
    _train("{data}", *OUT, id="train-config-hdf5", match=r"config file .*data.h5: not a TOML text file"),
    _train("{model}", *OUT, id="train-config-checkpoint", match=r"config file .*best.pt: not a TOML text file"),
    _train("{empty}", *OUT, id="train-config-empty", match=r"config file .*empty.h5: empty"),
    _train("{text}", *OUT, id="train-config-text", match=r"config file .*notes.txt: malformed TOML"),
    _train("{spec}", *OUT, id="train-config-is-gen-spec", match=r"unknown key 'system'"),
    _train("{ws}/missing.toml", *OUT, id="train-config-missing", match=r"missing.toml"),
    # -- data ------------------------------------------------------------------------------------------------
    _train(*C, "--data", "{nan}", *OUT, id="train-data-nan", match=r"nan.h5|training diverged: loss is nan at epoch 1"),
    _train(*C, "--data", "{inf}", *OUT, id="train-data-inf", match=r"inf.h5|training diverged: loss is nan at epoch 1"),
    _train(*C, "--data", "{unknown_system}", *OUT, id="train-data-unknown-system", match=r"unknown_system.h5.*pendulum"),
    _train(*C, "--data", "{rollout}", *OUT, id="train-data-rollout", match=r"rollout.h5"),
    _train(*C, "--data", "{text}", *OUT, id="train-data-text", match=r"notes.txt"),
    _train(*C, "--data", "{empty}", *OUT, id="train-data-empty", match=r"empty.h5"),
    _train(*C, "--data", "{dir}", *OUT, id="train-data-dir", match=r"adir"),
    _train(*C, "--data", "{ws}/missing.h5", *OUT, id="train-data-missing", match=r"missing.h5"),
    _train(*C, "--data", "{data},{co}", *OUT, id="train-data-mixed-shards", match=r"co.h5"),
    _train(*C, "--data", "{co}", "--set", "model.dim=3", *OUT, id="train-data-dim-mismatch", match=r"dim"),
    # -- divergence ------------------------------------------------------------------------------------------
    _train(*C, "--lr", "1e6", "--lr-min", "1e5", "--dtype", "float32", "--epochs", "3", *OUT, id="train-diverged",
           match=r"training diverged: loss is (nan|inf) at epoch \d+, step \d+; lower --lr \(now 1e\+06\)"),
    # -- seed ensembles (--ensemble N / seeds) -------------------------------------------------------------
    _train(*C, "--ensemble", "0", *OUT, id="train-ensemble-zero", match=r"--ensemble must be a positive integer"),
    _train(*C, "--ensemble", "-2", *OUT, id="train-ensemble-negative", match=r"--ensemble must be a positive integer"),
    _train(*C, "--ensemble", "2", "--optimizer", "lbfgs", *OUT, id="train-ensemble-lbfgs",
           match=r"optimizer 'lbfgs' cannot train an ensemble"),
    _train(*C, "--set", "seeds=[3, 3]", *OUT, id="train-ensemble-seeds-repeated", match=r"seeds must be distinct"),
    _train(*C, "--set", "seeds=[1, -1]", *OUT, id="train-ensemble-seeds-negative", match=r"seeds must be a non-empty list"),
    _train(*C, "--ensemble", "3", "--set", "seeds=[1, 2]", *OUT, id="train-ensemble-seeds-mismatch",
           match=r"ensemble = 3 but seeds lists 2 seeds"),
    _train("--resume", "{run}", "--epochs", "3", "--ensemble", "2", id="train-ensemble-resume",
           match=r"--ensemble with --resume .*: a resumed run keeps its members"),
    _api("train-ensemble-api-zero", lambda ws: _fit(ws, ensemble=0), r"ensemble must be a positive integer"),
    # -- resume ----------------------------------------------------------------------------------------------
    _train("--resume", "{run}", "--epochs", "1", id="train-resume-fewer-epochs",
           match=r"--epochs 1 is less than the 2 epochs .*run has done"),
    _train("--resume", "{run}", "--lr", "0.5", id="train-resume-change-lr", match=r"cannot change lr"),
    _train("--resume", "{run}", "--epochs", "0", id="train-resume-epochs-zero", match=r"--epochs must be a positive integer"),
    _train("--resume", "{run}", "--epochs", "3", "--set", "checkpoint_seconds=0", id="train-resume-bad-checkpoint-seconds",
           match=r"checkpoint_seconds must be"),
    _train("--resume", "{dir}", "--epochs", "3", id="train-resume-empty-dir", match=r"--resume .*adir: not a run directory"),
    _train("--resume", "{ws}", "--epochs", "3", id="train-resume-nonrun-dir", match=r"--resume .*: no last.pt there"),
    _train("--resume", "{text}", "--epochs", "3", id="train-resume-file", match=r"--resume .*notes.txt: not a run directory"),
    _train("--resume", "{ws}/nowhere", "--epochs", "3", id="train-resume-missing", match=r"nowhere: not a run directory"),
    _train("{config}", "--resume", "{run}", id="train-resume-with-config", match=r"give either CONFIG"),
    _train("--resume", "{run}", "--epochs", "3", "--out", "{out}/elsewhere", id="train-resume-out-differs",
           match=r"a resumed run stays in its directory"),
    _train("--resume", "{run}", "--epochs", "3", "--seq-len", "2", id="train-resume-seq-len", match=r"keeps its model"),
    _train("--resume", "{run}", "--epochs", "3", "--time-limit", "nan", id="train-resume-time-limit-nan",
           match=r"--time-limit must be a finite"),
    # -- Python API: model files -----------------------------------------------------------------------------
    _api("model-load-truncated", lambda ws: _load(ws.truncated_pt), r"truncated.pt: .*truncated or corrupt"),
    _api("model-load-foreign", lambda ws: _load(ws.foreign_pt), r"foreign.pt: .*weights_only"),
    _api("model-load-zeros", lambda ws: _load(ws.zeros_pt), r"zeros.pt: .*holds a Tensor, expected a dict"),
    _api("model-load-empty-dir", lambda ws: _load(ws.dir), r"adir: a directory without best.pt or last.pt"),
    _api("model-load-text", lambda ws: _load(ws.text), r"notes.txt: not a torch file \(UnpicklingError"),
    _api("model-load-hdf5", lambda ws: _load(ws.data), r"data.h5: .*HDF5"),
    _api("model-load-empty", lambda ws: _load(ws.empty), r"empty.h5: .*empty"),
    _api("model-load-missing", lambda ws: _load(Path(ws.ws) / "nope.pt"), r"nope.pt does not exist"),
    _api("model-load-wrong-config", lambda ws: _load(_wrong_config_pt(ws)), r"wrong.pt: key 'state_dict' does not match"),
    _api("model-load-checkpoint-zeros", lambda ws: __import__("vpintegrator.models", fromlist=["x"]).load_checkpoint(ws.zeros_pt),
         r"zeros.pt"),
    _api("model-build-L-zero", lambda ws: __import__("vpintegrator").build_model("vpt", dim=3, seq_len=3, L=0), r"model config for 'vpt': L: expected an integer >= 1, got 0"),
    _api("model-build-dim-zero", lambda ws: __import__("vpintegrator").build_model("vpt", dim=0, seq_len=3), r"dim: expected an integer >= 1, got 0"),
    _api("model-build-seq-len-negative", lambda ws: __import__("vpintegrator").build_model("vpff", dim=3, seq_len=-1),
         r"seq_len: expected an integer >= 1, got -1"),
    _api("model-build-blocks-float", lambda ws: __import__("vpintegrator").build_model("st", dim=3, seq_len=3, n_blocks=2.5),
         r"n_blocks: expected an integer >= 0, got 2.5"),
    _api("model-build-unknown", lambda ws: __import__("vpintegrator").build_model("vtp"), r"unknown model 'vtp'.*did you mean 'vpt'"),
    _api("model-build-unknown-key", lambda ws: __import__("vpintegrator").build_model("vpt", layers=2), r"unknown key 'layers'"),
    _api("model-build-symmetric-arbitrary-attention", lambda ws: __import__("vpintegrator").build_model("vpt", dim=3, skew_sym=False, symmetric=True),
         r"model config for 'vpt': symmetric: .*only skew_sym=true has; set skew_sym=true or symmetric=false"),
    _api("model-build-symmetric-not-bool", lambda ws: __import__("vpintegrator").build_model("vpff", dim=3, symmetric="yes"),
         r"symmetric: expected true or false, got 'yes'"),
    _api("model-build-activation", lambda ws: __import__("vpintegrator").build_model("vpt", dim=3, seq_len=3, activation="relux"),
         r"activation: expected one of .*got 'relux'"),
    _api("model-save-plain-module", lambda ws: __import__("vpintegrator").save_model(
        __import__("torch").nn.Linear(2, 2), Path(ws.out) / "x.pt"), r"no registry config"),
    # -- Python API: configs and fit ---------------------------------------------------------------------------
    _api("model-config-unknown-key", lambda ws: _tc(learning_rate=1), r"unknown key 'learning_rate'"),
    _api("model-config-lr-nan", lambda ws: _tc(lr=float("nan")), r"lr must be a finite number > 0"),
    _api("model-config-seed-negative", lambda ws: _tc(seed=-5), r"seed must be a non-negative integer"),
    _api("model-config-epochs-bool", lambda ws: _tc(epochs=True), r"epochs must be a positive integer"),
    _api("model-config-no-data", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).TrainConfig.from_dict(
        {"model": "vpt"}), r"data must list at least one"),
    _api("model-config-toml-hdf5", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).TrainConfig.from_toml(ws.data),
         r"not a TOML text file"),
    _api("model-config-toml-empty", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).TrainConfig.from_toml(ws.empty),
         r"empty"),
    _api("model-fit-lr-inf", lambda ws: _fit(ws, lr=float("inf")), r"lr must be a finite number > 0"),
    _api("model-fit-data-nan", lambda ws: _fit(ws, data=[ws.nan]), r"nan.h5|training diverged"),
    _api("model-fit-unknown-system", lambda ws: _fit(ws, data=[ws.unknown_system]), r"pendulum"),
    _api("model-fit-diverged", lambda ws: _fit(ws, lr=1e6, lr_min=1e5, epochs=3, dtype="float32"), r"training diverged: loss is"),
    _api("model-fit-out-is-data", lambda ws: _fit(ws, out=ws.data), r"is the input file"),
    _api("model-fit-out-is-config", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).fit(
        ws.config, out=ws.config), r"is the input file"),
    _api("model-fit-resume-truncated", lambda ws: _resume_with_last(ws, ws.truncated_pt), r"last.pt: .*truncated or corrupt"),
    _api("model-fit-resume-foreign", lambda ws: _resume_with_last(ws, ws.foreign_pt), r"last.pt: .*weights_only"),
    _api("model-fit-resume-zeros", lambda ws: _resume_with_last(ws, ws.zeros_pt), r"last.pt: .*expected a dict"),
    _api("model-fit-resume-best-as-last", lambda ws: _resume_with_last(ws, ws.model), r"last.pt: missing checkpoint key"),
    _api("model-fit-resume-other-arch", lambda ws: _resume_with_last(ws, _other_arch_pt(ws)),
         r"last.pt: its weights or optimizer state do not match the run's model"),
    _api("model-fit-resume-fewer-epochs", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).fit(
        resume=ws.run, epochs=1), r"epochs 1 is less than the 2 epochs"),
    _api("model-fit-resume-dir", lambda ws: __import__("vpintegrator.training", fromlist=["x"]).fit(resume=ws.dir, epochs=3),
         r"not a run directory"),
    _train(*C, "--data", "{data},{data}", *OUT, id="train-data-repeated",
           match=r"--data: '.*data.h5' is given twice; give each once"),
]
