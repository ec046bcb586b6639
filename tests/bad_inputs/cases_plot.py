"""Bad inputs to vp-plot and the plotting API (ids ``plot-`` for the CLI, ``plotapi-`` for the API)."""

from bad_inputs import Case


def _p(cid, args, match, exit_code=1):
    return Case(cid, "vp-plot", list(args), match, exit_code)


def _plot_all(*args, **kw):
    from vpintegrator.plotting import plot_all

    return plot_all(*args, **kw)


def _plot_training(*args, **kw):
    from vpintegrator.plotting import plot_training

    return plot_training(*args, **kw)


def _plot(name, *args, **kw):
    import vpintegrator.plotting as P

    return getattr(P, name)(*args, **kw)


def _figure_over_input(ws):
    import shutil

    src = shutil.copy(ws.rollout, ws.out + "/error.png")  # a rollout file named like a figure
    return _plot_all(src, ws.out, kinds=["error"], formats=["png"])


def _memory_plot(ws, **kw):
    from vpintegrator import integrate

    y0 = [[1.0, 0.0, 0.0]]
    rk4 = integrate("rigid_body", y0, 0.1, 10, method="rk4")
    return _plot_all({"rk4": rk4}, ws.out + "/f", **kw)


_R = ["{rollout}"]
_O = ["--out", "{out}/f"]

CASES = [
    # --- no command writes over its inputs
    _p("plot-out-is-rollout", [*_R, "--out", "{rollout}"], r"--out", exit_code=2),
    _p("plot-out-contains-rollout-name", [*_R, "--kind", "error", "--set", "formats=[\"h5\"]", "--out", "{ws}"],
       r"formats"),
    _p("plot-training-out-is-log", ["--kind", "training", "{run}", "--out", "{run}/log.csv"], r"--out", exit_code=2),
    # --- files of the wrong kind
    _p("plot-data-as-rollout", ["{data}", *_O], r"data\.h5.*vp-rollout"),
    _p("plot-co-as-rollout", ["{co}", *_O], r"co\.h5"),
    _p("plot-text-as-rollout", ["{text}", *_O], r"notes\.txt"),
    _p("plot-empty-as-rollout", ["{empty}", *_O], r"empty\.h5"),
    _p("plot-missing-rollout", ["{ws}/missing.h5", *_O], r"missing\.h5"),
    _p("plot-dir-without-log", ["{dir}", *_O], r"adir"),
    _p("plot-training-dir-without-log", ["--kind", "training", "{dir}", *_O], r"adir.*log\.csv"),
    _p("plot-training-of-rollout-file", ["--kind", "training", "{rollout}", *_O], r"rollout\.h5"),
    _p("plot-training-missing-dir", ["--kind", "training", "{ws}/norun", *_O], r"norun"),
    _p("plot-two-rollouts", ["{rollout}", "{rollout}", *_O], r"one rollout file"),
    # --- numeric flags
    _p("plot-dpi-zero", [*_R, "--dpi", "0", *_O], r"--dpi"),
    _p("plot-dpi-negative", [*_R, "--dpi", "-10", *_O], r"--dpi"),
    _p("plot-dpi-nan", [*_R, "--dpi", "nan", *_O], r"--dpi", exit_code=2),
    _p("plot-set-dpi-nan", [*_R, "--set", "dpi=nan", *_O], r"dpi"),
    _p("plot-set-dpi-float", [*_R, "--set", "dpi=99.5", *_O], r"dpi"),
    _p("plot-training-dpi-zero", ["--kind", "training", "{run}", "--dpi", "0", *_O], r"--dpi"),
    _p("plot-max-points-one", [*_R, "--max-points", "1", "--kind", "error", *_O], r"--max-points"),
    _p("plot-max-points-negative", [*_R, "--max-points", "-5", *_O], r"--max-points"),
    _p("plot-set-max-points-string", [*_R, "--set", "max_points=\"many\"", *_O], r"max.points.*'many'"),
    _p("plot-dpi-twice", [*_R, "--dpi", "100", "--set", "dpi=100", *_O], r"dpi"),
    # --- kinds, trajectories, options
    _p("plot-kind-unknown", [*_R, "--kind", "nope", *_O], r"--kind", exit_code=2),
    _p("plot-kind-training-and-error", ["--kind", "training", "--kind", "error", "{run}", *_O], r"--kind"),
    _p("plot-traj-not-in-rollout", [*_R, "--traj", "7", *_O], r"--traj 7 is not in"),
    _p("plot-traj-abc", [*_R, "--traj", "abc", *_O], r"--traj"),
    _p("plot-traj-negative", [*_R, "--traj", "-1", *_O], r"--traj"),
    _p("plot-training-traj", ["--kind", "training", "{run}", "--traj", "0", *_O], r"--traj"),
    _p("plot-set-unknown-key", [*_R, "--set", "bogus=1", *_O], r"bogus"),
    _p("plot-set-band-string", [*_R, "--set", "band=\"yes\"", *_O], r"band"),
    _p("plot-set-sphere-number", [*_R, "--set", "sphere=1", *_O], r"sphere"),
    _p("plot-set-threshold-negative", [*_R, "--set", "threshold=-1", *_O], r"threshold"),
    _p("plot-set-threshold-nan", [*_R, "--set", "threshold=nan", *_O], r"threshold"),
    _p("plot-set-methods-unknown", [*_R, "--set", "methods=[\"nope\"]", *_O], r"nope"),
    _p("plot-set-methods-number", [*_R, "--set", "methods=3", *_O], r"methods"),
    _p("plot-set-formats-bad", [*_R, "--set", "formats=[\"bmp\"]", *_O], r"bmp"),
    _p("plot-set-formats-empty", [*_R, "--set", "formats=[]", *_O], r"formats"),
    _p("plot-set-traj-string", [*_R, "--set", "traj=\"x\"", *_O], r"traj"),
    _p("plot-training-set-band", ["--kind", "training", "{run}", "--set", "band=false", *_O], r"band"),
    _p("plot-set-nested", [*_R, "--set", "a.b=1", *_O], r"a"),
    _p("plot-set-style-unknown", [*_R, "--set", "style=\"tiny\"", *_O], r"style 'tiny' is not a preset"),
    _p("plot-set-style-missing-file", [*_R, "--set", "style=\"{ws}/none.mplstyle\"", *_O], r"none\.mplstyle"),
    _p("plot-set-style-not-a-style-file", [*_R, "--set", "style=\"{text}\"", *_O], r"notes\.txt"),
    _p("plot-set-style-number", [*_R, "--set", "style=3", *_O], r"style 3"),
    _p("plot-training-set-style-unknown", ["--kind", "training", "{run}", "--set", "style=\"tiny\"", *_O],
       r"style 'tiny'"),
    # --- Python API
    Case("plotapi-data-as-rollout", api=lambda ws: _plot_all(ws.data, ws.out + "/f"), match=r"data\.h5"),
    Case("plotapi-text", api=lambda ws: _plot_all(ws.text, ws.out + "/f"), match=r"notes\.txt"),
    Case("plotapi-empty", api=lambda ws: _plot_all(ws.empty, ws.out + "/f"), match=r"empty\.h5"),
    Case("plotapi-dir", api=lambda ws: _plot_all(ws.dir, ws.out + "/f"), match=r"adir"),
    Case("plotapi-out-is-rollout", api=lambda ws: _plot_all(ws.rollout, ws.rollout), match=r"rollout\.h5"),
    Case("plotapi-figure-over-input", api=_figure_over_input, match=r"error\.png is the input file"),
    Case("plotapi-out-is-file", api=lambda ws: _plot_all(ws.rollout, ws.text), match=r"notes\.txt"),
    Case("plotapi-dpi-zero", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", dpi=0), match=r"dpi"),
    Case("plotapi-dpi-nan", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", dpi=float("nan")), match=r"dpi"),
    Case("plotapi-max-points-one", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", max_points=1),
         match=r"max_points"),
    Case("plotapi-kind-unknown", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", kinds=["nope"]), match=r"nope"),
    Case("plotapi-traj-missing", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", traj=[99]), match=r"traj 99"),
    Case("plotapi-traj-float", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", traj=[0.5]), match=r"traj"),
    Case("plotapi-option-unknown", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", bogus=1), match=r"bogus"),
    Case("plotapi-formats-bad", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", formats=["bmp"]), match=r"bmp"),
    Case("plotapi-threshold-nan", api=lambda ws: _plot_all(ws.rollout, ws.out + "/f", threshold=float("nan")),
         match=r"threshold"),
    Case("plotapi-source-number", api=lambda ws: _plot_all(42, ws.out + "/f"), match=r"plot source"),
    Case("plotapi-memory-reference-wrong", api=lambda ws: _memory_plot(ws, reference=3), match=r"reference"),
    Case("plotapi-error-unknown-method", api=lambda ws: _plot("plot_error", ws.rollout, methods=["nope"]),
         match=r"nope"),
    Case("plotapi-phase-traj-missing", api=lambda ws: _plot("plot_phase", ws.rollout, traj=5), match=r"traj 5"),
    Case("plotapi-volume-in-memory", api=lambda ws: _plot("plot_volume",
                                                          __import__("vpintegrator").read_trajectories(ws.co)),
         match=r"no volume data"),
    Case("plotapi-training-dir-without-log", api=lambda ws: _plot_training([ws.dir], ws.out + "/f"), match=r"log\.csv"),
    Case("plotapi-training-rollout-file", api=lambda ws: _plot_training([ws.rollout], ws.out + "/f"),
         match=r"rollout\.h5"),
    Case("plotapi-training-dpi", api=lambda ws: _plot_training([ws.run], ws.out + "/f", dpi=-1), match=r"dpi"),
    Case("plotapi-training-out-is-file", api=lambda ws: _plot_training([ws.run], ws.run + "/log.csv"),
         match=r"log\.csv"),
    Case("plotapi-training-none", api=lambda ws: _plot_training([], ws.out + "/f"), match=r"run"),
    Case("plotapi-style-unknown", api=lambda ws: _plot("plot_error", ws.rollout, style="tiny"),
         match=r"style 'tiny' is not a preset"),
    Case("plotapi-style-bad-rc", api=lambda ws: _plot("plot_error", ws.rollout, style={"lines.linewidth": "x"}),
         match=r"style \(dict\)"),
    Case("plotapi-ax-not-axes", api=lambda ws: _plot("plot_error", ws.rollout, ax=3), match=r"ax: .*got a int"),
    Case("plotapi-axes-count", api=lambda ws: _plot("plot_volume", ws.rollout,
                                                    axes=[__import__("matplotlib.figure").figure.Figure().add_subplot()]),
         match=r"axes: this figure draws 2 panels"),
    Case("plotapi-training-style-unknown", api=lambda ws: _plot_training([ws.run], ws.out + "/f", style="tiny"),
         match=r"style 'tiny'"),
    _p("plot-traj-repeated", [*_R, "--traj", "0,0", "--out", "{out}/f"], r"--traj: 0 is given twice; give each once"),
    _p("plot-kind-repeated", [*_R, "--kind", "error", "--kind", "error", "--out", "{out}/f"],
       r"--kind: 'error' is given twice; give each once"),
    _p("plot-label-repeated", [*_R, "--label", "rk4=A", "--label", "rk4=B", "--out", "{out}/f"],
       r"--label: 'rk4' is given twice; give each once"),
]
