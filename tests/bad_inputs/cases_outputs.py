"""Outputs that exist: the overwrite rule (``out-`` for the CLIs, ``outapi-`` for the Python API).

An existing output is refused unless ``--overwrite`` (``overwrite=True``); even then a file that is not
of the command's kind (a checkpoint, a source file, an HDF5 file of another schema or not written by this
package, a directory that is not a run directory, a figure matplotlib did not draw) is never replaced.
Links are judged by what they point to. The table's check that every workspace file is byte-identical
afterwards is the point of each row (and that no lock file stays behind).
"""

from pathlib import Path

from bad_inputs import Case

_GEN = ["rigid_body", "--n-traj", "3", "--quiet"]
_ROLL = ["--data", "{data}", "--integrators", "rk4", "--n-traj", "2", "--quiet"]
_TRAIN = ["--data", "{data}", "--model", "vpt", "--epochs", "3", "--quiet"]
_W = ["--overwrite"]

_EXISTS = r"already exists \(a {what}\); give another path, or use --overwrite to replace it"
_NEVER = r"exists and is {what}, not a {mine}: it is never replaced, also with --overwrite"


def _c(cid, command, args, match):
    return Case(cid, command, list(args), match, 1)


def _api(cid, fn, match):
    return Case(cid, None, [], match, 1, fn)


def _traj():
    from vpintegrator import integrate

    return integrate("rigid_body", [[1.0, 0.0, 0.0]], 0.1, 3, method="rk4")


def _write_traj(path, **kw):
    from vpintegrator.data import write_trajectories

    return write_trajectories(path, _traj(), **kw)


def _save_model(ws, path, **kw):
    from vpintegrator.models import load_model, save_model

    return save_model(load_model(ws.model), path, **kw)


def _rollouts(ws, out, **kw):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    return run_rollouts(RolloutConfig(data=ws.data, integrators=["rk4"], n_traj=2, out=out), **kw)


def _fit(ws, out, **kw):
    from vpintegrator.training import fit

    cfg = {"data": [ws.data], "model": {"name": "vpt", "seq_len": 3, "n_blocks": 1, "L": 2}, "epochs": 1,
           "batch_size": 32, "dtype": "float64", "device": "cpu", "out": out}
    return fit(cfg, **kw)


def _save_figure(path, **kw):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from vpintegrator.plotting.style import save_figure

    fig = plt.figure()
    try:
        return save_figure(fig, path, formats=["png"], **kw)
    finally:
        plt.close(fig)


def _generate(out, **kw):
    from vpintegrator.data.generation import generate
    from vpintegrator.data.spec import load_spec

    return generate(load_spec("rigid_body", n_traj=2), out=out, **kw)


CASES = [
    # --- the four rows of issue 25
    _c("out-rollout-over-checkpoint", "vp-rollout", [*_ROLL, "--out", "{model}"],
       r"--out .*run/best.pt exists and is a model checkpoint, not a vp-rollout file: it is never replaced"),
    _c("out-rollout-over-source", "vp-rollout", [*_ROLL, "--out", "{source}"],
       r"--out .*mysys.py exists and is a source or text file, not a vp-rollout file"),
    _c("out-gen-over-dataset", "vp-gen", [*_GEN, "--out", "{data}"], _EXISTS.format(what="vp-gen trajectory file")),
    _c("out-train-twice-same-out", "vp-train", [*_TRAIN, "--out", "{run}"], r"--out .*run: already holds a run.*--overwrite"),
    # --- --overwrite replaces only the command's own kind
    _c("out-rollout-over-checkpoint-overwrite", "vp-rollout", [*_ROLL, "--out", "{model}", *_W],
       _NEVER.format(what="a model checkpoint", mine="vp-rollout file")),
    _c("out-rollout-over-source-overwrite", "vp-rollout", [*_ROLL, "--out", "{source}", *_W],
       _NEVER.format(what="a source or text file", mine="vp-rollout file")),
    _c("out-rollout-over-data-overwrite", "vp-rollout",  # the data file vp-train reads (config.toml's data)
       ["--data", "{data_im}", "--integrators", "rk4", "--n-traj", "2", "--quiet", "--out", "{data}", *_W],
       _NEVER.format(what="a vp-gen trajectory file", mine="vp-rollout file")),
    _c("out-rollout-over-foreign-h5-overwrite", "vp-rollout", [*_ROLL, "--out", "{foreign_h5}", *_W],
       _NEVER.format(what="an HDF5 file not written by vpintegrator", mine="vp-rollout file")),
    _c("out-rollout-over-other-schema-overwrite", "vp-rollout", [*_ROLL, "--out", "{other_schema}", *_W],
       _NEVER.format(what="an HDF5 file not written by vpintegrator", mine="vp-rollout file")),
    _c("out-rollout-over-existing", "vp-rollout", [*_ROLL, "--out", "{rollout}"], _EXISTS.format(what="vp-rollout file")),
    _c("out-rollout-table-over-log", "vp-rollout", [*_ROLL, "--out", "{run}/log.h5", *_W],  # log.csv: not a table
       r"--out .*run/log.csv exists and is a file not written by this command, not a vp-rollout metrics table"),
    Case("out-rollout-over-dir-link", "vp-rollout", [*_ROLL, "--out", "{link_run}", *_W], r"link_run' is a directory",
         2),
    _c("out-gen-over-rollout-overwrite", "vp-gen", [*_GEN, "--out", "{rollout}", *_W],
       _NEVER.format(what="a vp-rollout file", mine="vp-gen trajectory file")),
    _c("out-gen-over-checkpoint-overwrite", "vp-gen", [*_GEN, "--out", "{model}", *_W],
       _NEVER.format(what="a model checkpoint", mine="vp-gen trajectory file")),
    _c("out-gen-over-source-overwrite", "vp-gen", [*_GEN, "--out", "{source}", *_W],
       _NEVER.format(what="a source or text file", mine="vp-gen trajectory file")),
    _c("out-gen-over-foreign-h5-overwrite", "vp-gen", [*_GEN, "--out", "{foreign_h5}", *_W],
       _NEVER.format(what="an HDF5 file not written by vpintegrator", mine="vp-gen trajectory file")),
    _c("out-gen-over-other-schema-overwrite", "vp-gen", [*_GEN, "--out", "{other_schema}", *_W],
       _NEVER.format(what="an HDF5 file not written by vpintegrator", mine="vp-gen trajectory file")),
    _c("out-gen-over-empty-overwrite", "vp-gen", [*_GEN, "--out", "{empty}", *_W],
       _NEVER.format(what="a file not written by this command", mine="vp-gen trajectory file")),
    _c("out-gen-over-text-overwrite", "vp-gen", [*_GEN, "--out", "{text}", *_W],
       _NEVER.format(what="a source or text file", mine="vp-gen trajectory file")),
    _c("out-gen-over-figure-overwrite", "vp-gen", [*_GEN, "--out", "{figs}/error.png", *_W],
       _NEVER.format(what="a figure drawn by matplotlib", mine="vp-gen trajectory file")),
    # --- symbolic links: judged by what they point to
    _c("out-gen-link-to-dataset", "vp-gen", [*_GEN, "--out", "{link_data}"],
       r"--out .*link_data.h5 \(a link to .*data.h5\) already exists \(a vp-gen trajectory file\)"),
    _c("out-gen-link-to-rollout-overwrite", "vp-gen", [*_GEN, "--out", "{link_rollout}", *_W],
       r"link_rollout.h5 \(a link to .*rollout.h5\) exists and is a vp-rollout file, not a vp-gen trajectory file"),
    _c("out-gen-link-to-checkpoint-overwrite", "vp-gen", [*_GEN, "--out", "{link_model}", *_W],
       r"link_model.pt \(a link to .*run/best.pt\) exists and is a model checkpoint"),
    _c("out-rollout-link-to-rollout", "vp-rollout", [*_ROLL, "--out", "{link_rollout}"],
       r"link_rollout.h5 \(a link to .*rollout.h5\) already exists \(a vp-rollout file\)"),
    _c("out-rollout-link-to-checkpoint-overwrite", "vp-rollout", [*_ROLL, "--out", "{link_model}", *_W],
       r"link_model.pt \(a link to .*run/best.pt\) exists and is a model checkpoint, not a vp-rollout file"),
    _c("out-rollout-link-to-data-input", "vp-rollout", [*_ROLL, "--out", "{link_data}", *_W], r"is the input file"),
    _c("out-train-link-to-run", "vp-train", [*_TRAIN, "--out", "{link_run}"], r"already holds a run"),
    # --- outputs inside a run directory
    _c("out-gen-into-run-config", "vp-gen", [*_GEN, "--out", "{run}/config.toml", *_W],
       _NEVER.format(what="a source or text file", mine="vp-gen trajectory file")),
    _c("out-gen-into-run-log", "vp-gen", [*_GEN, "--out", "{run}/log.csv", *_W],
       _NEVER.format(what="a file not written by this command", mine="vp-gen trajectory file")),
    _c("out-gen-into-run-last", "vp-gen", [*_GEN, "--out", "{run}/last.pt", *_W],
       _NEVER.format(what="a model checkpoint", mine="vp-gen trajectory file")),
    _c("out-rollout-into-run-last", "vp-rollout", [*_ROLL, "--out", "{run}/last.pt", *_W],
       _NEVER.format(what="a model checkpoint", mine="vp-rollout file")),
    _c("out-rollout-into-run-summary", "vp-rollout", [*_ROLL, "--out", "{run}/summary.json", *_W],
       _NEVER.format(what="a source or text file", mine="vp-rollout file")),
    _c("out-train-into-run-file", "vp-train", [*_TRAIN, "--out", "{run}/best.pt", *_W],
       r"--out .*best.pt: exists and is not a directory; it is never replaced, also with --overwrite"),
    # --- vp-train --overwrite replaces a run directory and nothing else
    _c("out-train-nonrun-dir-overwrite", "vp-train", [*_TRAIN, "--out", "{ws}", *_W],
       r"not empty and holds no run; it is never replaced, also with --overwrite"),
    _c("out-train-over-file-overwrite", "vp-train", [*_TRAIN, "--out", "{rollout}", *_W],
       r"exists and is not a directory; it is never replaced, also with --overwrite"),
    _c("out-train-run-with-user-file-overwrite", "vp-train", [*_TRAIN, "--out", "{run_foreign}", *_W],
       r"--out .*run_foreign: log.csv is a file of yours, not what vp-train writes there; it is never removed"),
    _c("out-train-resume-overwrite", "vp-train", ["--resume", "{run}", "--epochs", "3", *_W],
       r"--resume .*run with overwrite: a resumed run continues its directory"),
    # --- vp-plot replaces only the figures it draws
    _c("out-plot-existing-figures", "vp-plot", ["{rollout}", "--kind", "error", "--out", "{figs}"],
       r"--out .*figs/error.pdf already exists \(a figure drawn by matplotlib\); give another path, or use --overwrite"),
    _c("out-plot-user-figure-overwrite", "vp-plot", ["{rollout}", "--kind", "error", "--out", "{figs_foreign}", *_W],
       r"figs_foreign/error.png exists and is a file not written by this command, not a figure drawn by matplotlib"),
    _c("out-plot-training-user-figure-overwrite", "vp-plot",
       ["{run}", "--kind", "training", "--out", "{figs_foreign}", *_W],
       r"figs_foreign/training.png exists and is a file not written by this command"),
    _c("out-plot-training-existing", "vp-plot", ["{run}", "--kind", "training", "--out", "{figs}"],
       r"figs/training.png already exists"),
    # --- the Python API: overwrite=False by default, and the same kinds
    _api("outapi-write-trajectories-existing", lambda ws: _write_traj(ws.data), r"data.h5 already exists"),
    _api("outapi-write-trajectories-over-rollout", lambda ws: _write_traj(ws.rollout, overwrite=True),
         r"rollout.h5 exists and is a vp-rollout file, not a vp-gen trajectory file"),
    _api("outapi-write-trajectories-link-to-rollout", lambda ws: _write_traj(ws.link_rollout, overwrite=True),
         r"a link to .*rollout.h5\) exists and is a vp-rollout file"),
    _api("outapi-write-trajectories-overwrite-not-bool", lambda ws: _write_traj(ws.data, overwrite="yes"),
         r"overwrite must be True or False; got 'yes'"),
    _api("outapi-generate-over-checkpoint", lambda ws: _generate(ws.model, overwrite=True),
         r"out .*best.pt exists and is a model checkpoint"),
    _api("outapi-generate-existing", lambda ws: _generate(ws.data), r"out .*data.h5 already exists.*use overwrite"),
    _api("outapi-save-model-existing", lambda ws: _save_model(ws, ws.model), r"best.pt already exists \(a model checkpoint\)"),
    _api("outapi-save-model-over-data", lambda ws: _save_model(ws, ws.data, overwrite=True),
         r"data.h5 exists and is a vp-gen trajectory file, not a model checkpoint"),
    _api("outapi-save-model-over-source", lambda ws: _save_model(ws, ws.source, overwrite=True),
         r"mysys.py exists and is a source or text file, not a model checkpoint"),
    _api("outapi-rollouts-over-source", lambda ws: _rollouts(ws, ws.source, overwrite=True),
         r"out .*mysys.py exists and is a source or text file, not a vp-rollout file"),
    _api("outapi-rollouts-existing", lambda ws: _rollouts(ws, ws.rollout), r"out .*rollout.h5 already exists"),
    _api("outapi-fit-run-with-user-file", lambda ws: _fit(ws, ws.run_foreign, overwrite=True),
         r"run_foreign: log.csv is a file of yours, not what vp-train writes there"),
    _api("outapi-fit-existing-run", lambda ws: _fit(ws, ws.run), r"holds a run"),
    _api("outapi-fit-resume-overwrite", lambda ws: __import__("vpintegrator").fit(resume=ws.run, overwrite=True),
         r"resume .* with overwrite"),
    _api("outapi-write-table-over-log", lambda ws: __import__("vpintegrator.metrics").metrics.write_table(
        [{"method": "x"}], Path(ws.run) / "log", overwrite=True), r"log.csv exists and is a file not written by this command"),
    _api("outapi-save-figure-over-user-png", lambda ws: _save_figure(Path(ws.figs_foreign) / "error", overwrite=True),
         r"error.png exists and is a file not written by this command, not a figure drawn by matplotlib"),
    _api("outapi-save-figure-existing", lambda ws: _save_figure(Path(ws.figs) / "error"),
         r"error.png already exists \(a figure drawn by matplotlib\)"),
]
