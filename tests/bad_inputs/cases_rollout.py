"""Bad inputs to vp-rollout and the rollout API (ids ``rollout-`` for the CLI, ``rollapi-`` for the API)."""

import numpy as np

from bad_inputs import Case

_BASE = ["--data", "{data}", "--integrators", "rk4", "--n-traj", "2", "--quiet"]
_OUT = ["--out", "{out}/r.h5"]


def _r(cid, extra, match, exit_code=1, base=True, out=True):
    args = (list(_BASE) if base else []) + list(extra) + (list(_OUT) if out else [])
    return Case(cid, "vp-rollout", args, match, exit_code)


def _run(ws, **kw):
    from vpintegrator.rollout import RolloutConfig, run_rollouts

    kw.setdefault("data", ws.data)
    kw.setdefault("integrators", ["rk4"])
    kw.setdefault("n_traj", 2)
    kw.setdefault("out", ws.out + "/r.h5")
    return run_rollouts(RolloutConfig(**kw))


def _rk4():
    from vpintegrator.rollout import IntegratorStep

    return IntegratorStep("rigid_body", "rk4", 0.1)


def _w0():
    return np.array([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]])


def _model(ws):
    from vpintegrator.models import load_model

    return load_model(ws.run)


def _rollout(*args, **kw):
    from vpintegrator.rollout import rollout

    return rollout(*args, **kw)


def _stream(*args, **kw):
    from vpintegrator.rollout import stream_rollout

    return stream_rollout(*args, **kw)


def _read_rollout(*args, **kw):
    from vpintegrator.data.rollouts import read_rollout

    return read_rollout(*args, **kw)


def _model_step(*args, **kw):
    from vpintegrator.rollout import ModelStep

    return ModelStep(*args, **kw)


def _load_cfg(*args, **kw):
    from vpintegrator.rollout import load_rollout_config

    return load_rollout_config(*args, **kw)


def _initial_window(*args, **kw):
    from vpintegrator.rollout import initial_window

    return initial_window(*args, **kw)


def _integrator_step(*args):
    from vpintegrator.rollout import IntegratorStep

    return IntegratorStep(*args)


CASES = [
    # --- no command writes over its inputs
    _r("rollout-out-is-data", ["--out", "{data}"], r"is the input file", out=False),
    _r("rollout-out-is-data-relative", ["--out", "./data.h5"], r"is the input file", out=False),
    _r("rollout-out-is-data-dotdot", ["--out", "{out}/../data.h5"], r"is the input file", out=False),
    _r("rollout-out-is-model", ["--model", "{model}", "--out", "{model}"], r"is the input file", out=False),
    _r("rollout-out-is-model-in-run", ["--model", "{run}", "--out", "{run}/best.pt"], r"is the input file", out=False),
    _r("rollout-out-is-config", ["{rollout_toml}", "--out", "{rollout_toml}"], r"is the input file",
       base=False, out=False),
    _r("rollout-out-is-data-im", ["--data", "{data_im}", "--integrators", "rk4", "--out", "{data_im}"], r"is the input file", out=False,
       base=False),
    # --- numeric flags
    _r("rollout-t-end-nan", ["--t-end", "nan"], r"--t-end"),
    _r("rollout-t-end-inf", ["--t-end", "inf"], r"--t-end"),
    _r("rollout-t-end-negative", ["--t-end", "-5"], r"--t-end"),
    _r("rollout-t-end-zero", ["--t-end", "0"], r"--t-end"),
    _r("rollout-t-end-word", ["--t-end", "abc"], r"--t-end", exit_code=2),
    _r("rollout-t-end-huge", ["--t-end", "1e9"], r"--t-end .*(?i:memory).*shorter t_end"),
    _r("rollout-t-end-huge-set", ["--set", "t_end=1e12"], r"(?i)(memory|disk)"),
    _r("rollout-chunk-steps-zero", ["--chunk-steps", "0"], r"--chunk-steps"),
    _r("rollout-chunk-steps-negative", ["--chunk-steps", "-3"], r"--chunk-steps"),
    _r("rollout-blowup-zero", ["--blowup", "0"], r"--blowup"),
    _r("rollout-blowup-nan", ["--blowup", "nan"], r"--blowup"),
    _r("rollout-blowup-negative", ["--blowup", "-1"], r"--blowup"),
    Case("rollout-n-traj-zero", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--n-traj", "0",
                                               "--out", "{out}/r.h5"], r"--n-traj"),
    Case("rollout-n-traj-too-many", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--n-traj", "99",
                                                   "--out", "{out}/r.h5"], r"--n-traj"),
    Case("rollout-n-traj-negative", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--n-traj", "-2",
                                                   "--out", "{out}/r.h5"], r"--n-traj"),
    Case("rollout-traj-negative", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--traj", "-1",
                                                 "--out", "{out}/r.h5"], r"--traj"),
    Case("rollout-traj-out-of-range", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--traj", "8",
                                                     "--out", "{out}/r.h5"], r"--traj.*out of range"),
    Case("rollout-traj-abc", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--traj", "abc",
                                            "--out", "{out}/r.h5"], r"--traj"),
    Case("rollout-traj-duplicate", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--traj", "1,1",
                                                  "--out", "{out}/r.h5"], r"--traj"),
    Case("rollout-traj-empty", "vp-rollout", ["--data", "{data}", "--integrators", "rk4", "--traj", ",",
                                              "--out", "{out}/r.h5"], r"--traj"),
    _r("rollout-traj-and-n-traj", ["--traj", "0,1"], r"--traj"),
    # --- models
    _r("rollout-model-truncated", ["--model", "{truncated_pt}"], r"truncated\.pt"),
    _r("rollout-model-foreign", ["--model", "{foreign_pt}"], r"foreign\.pt"),
    _r("rollout-model-zeros", ["--model", "{zeros_pt}"], r"zeros\.pt"),
    _r("rollout-model-text", ["--model", "{text}"], r"notes\.txt"),
    _r("rollout-model-dir-without-checkpoints", ["--model", "{dir}"], r"adir"),
    _r("rollout-model-missing", ["--model", "{ws}/nope.pt"], r"nope\.pt"),
    # another system: the trained-on check names both systems before the dimension check runs
    _r("rollout-model-other-dim", ["--data", "{co}", "--model", "{model}"],
       r"trained on system .rigid_body.* holds .coupled_oscillator.", base=False),
    _r("rollout-model-label-reference", ["--model", "reference={model}"], r"label 'reference'"),
    _r("rollout-model-pretrained-unknown", ["--model", "pretrained:nope"], r"nope"),
    _r("rollout-model-horizon-shorter-than-window", ["--model", "{model}", "--t-end", "0.2"], r"--t-end"),
    _r("rollout-model-twice", ["--model", "{model}", "--model", "{model}"], r"used twice"),
    # --- data files
    _r("rollout-data-rollout-file", ["--data", "{rollout}", "--integrators", "rk4"], r"rollout\.h5", base=False),
    _r("rollout-data-text", ["--data", "{text}", "--integrators", "rk4"], r"notes\.txt", base=False),
    _r("rollout-data-empty", ["--data", "{empty}", "--integrators", "rk4"], r"empty\.h5", base=False),
    _r("rollout-data-dir", ["--data", "{dir}", "--integrators", "rk4"], r"adir", base=False),
    _r("rollout-data-missing", ["--data", "{ws}/missing.h5", "--integrators", "rk4"], r"missing\.h5", base=False),
    _r("rollout-data-unknown-system", ["--data", "{unknown_system}", "--integrators", "rk4"], r"pendulum",
       base=False),
    _r("rollout-data-v0", ["--data", "{v0}", "--integrators", "rk4"], r"v0\.h5", base=False),
    _r("rollout-data-nan", ["--data", "{nan}", "--integrators", "rk4", "--traj", "2"], r"nan\.h5", base=False),
    _r("rollout-data-inf", ["--data", "{inf}", "--integrators", "rk4", "--traj", "3"], r"inf\.h5", base=False),
    _r("rollout-no-data", ["--integrators", "rk4"], r"--data", base=False),
    # --- config files and settings
    _r("rollout-config-hdf5", ["{data}"], r"data\.h5", base=False),
    _r("rollout-config-binary", ["{model}"], r"best\.pt", base=False),
    _r("rollout-config-empty", ["{empty}", "--data", "{data}", "--integrators", "rk4"], r"empty\.h5",
       base=False),
    _r("rollout-config-dir", ["{dir}"], r"CONFIG.*is a directory", exit_code=2, base=False),
    _r("rollout-config-missing", ["{ws}/nope.toml"], r"nope\.toml", base=False),
    _r("rollout-set-unknown-key", ["--set", "bogus=1"], r"bogus"),
    _r("rollout-set-bad-blowup", ["--set", "blowup=\"big\""], r"blowup"),
    _r("rollout-set-bad-volume", ["--set", "volume=3"], r"volume"),
    _r("rollout-set-twice", ["--set", "t_end=5", "--t-end", "5"], r"t_end"),
    _r("rollout-set-not-key-value", ["--set", "blowup"], r"blowup"),
    _r("rollout-integrator-unknown", ["--integrators", "nope"], r"nope"),
    _r("rollout-init-unknown", ["--model", "{model}", "--init", "nope"], r"--init"),
    _r("rollout-device-bad", ["--device", "tpu"], r"tpu"),
    _r("rollout-nothing-to-roll-out", ["--data", "{data}"], r"nothing to roll out", base=False),
    _r("rollout-out-dir", ["--out", "{dir}"], r"--out", exit_code=2, out=False),
    _r("rollout-fail-on-blowup", ["--integrators", "euler", "--blowup", "1.001", "--t-end", "4", "--fail-on-blowup"],
       r"failed.*euler.*exit status 3", exit_code=3),
    _r("rollout-heldout-negative", ["--heldout", "-1"], r"--heldout must be an integer >= 0"),
    _r("rollout-heldout-word", ["--heldout", "many"], r"--heldout", exit_code=2),
    _r("rollout-heldout-seed-negative", ["--heldout", "2", "--heldout-seed", "-3"], r"--heldout-seed must be"),
    _r("rollout-reference-bogus", ["--reference", "bogus"], r"--reference must be exact or data; got 'bogus'"),
    # --- issue 88: fitted rows on a file with NaN/Inf refused before any row runs; the only row unfittable; a
    # family file whose parameter_dists disagree with its system and /params
    _r("rollout-fit-on-data-nan", ["--fit-on-data", "--data", "{nan}", "--integrators", "arx", "--quiet"],
       r"^Error: \S*nan\.h5: dataset '/y' holds NaN at \[2, 5, 1\]", base=False),  # before any row: not a row's
    _r("rollout-fit-on-data-inf", ["--fit-on-data", "--data", "{inf}", "--integrators", "narx", "--quiet"],
       r"^Error: \S*inf\.h5: dataset '/y' holds \+Inf at \[3, 7, 0\]", base=False),
    _r("rollout-only-row-underdetermined", ["--fit-on-data", "--data", "{data}", "--integrators", "narx",
                                            "--context-len", "15", "--quiet"],
       r"no row could be made, so nothing was written: narx: 36 training windows for 52 coefficients .*underdetermined",
       base=False),
    _r("rollout-family-dists-disagree", ["--data", "{family_bad}", "--integrators", "rk4", "--heldout", "3", "--quiet"],
       r"--heldout: .*family_bad\.h5: parameter_dists\.moment: system 'rigid_body' has no parameter 'moment'.*"
       r"'/params' has \['inertia\[0\]'", base=False),
    _r("rollout-set-reference-bogus", ["--set", "reference=\"flow\""], r"reference must be exact or data"),
    # --- Python API
    Case("rollapi-reference-bogus", api=lambda ws: _run(ws, reference="bogus"), match=r"reference must be exact or data"),
    Case("rollapi-heldout-negative", api=lambda ws: _run(ws, heldout=-1), match=r"heldout must be an integer >= 0"),
    Case("rollapi-heldout-float", api=lambda ws: _run(ws, heldout=2.5), match=r"heldout"),
    Case("rollapi-out-is-data", api=lambda ws: _run(ws, out=ws.data), match=r"is the input file"),
    Case("rollapi-out-is-config-model", api=lambda ws: _run(ws, models=[ws.model], out=ws.model),
         match=r"is the input file"),
    Case("rollapi-t-end-nan", api=lambda ws: _run(ws, t_end=float("nan")), match=r"t_end"),
    Case("rollapi-t-end-huge", api=lambda ws: _run(ws, t_end=1e9), match=r"(?i)memory"),
    Case("rollapi-t-end-string", api=lambda ws: _run(ws, t_end="long"), match=r"t_end"),
    Case("rollapi-chunk-steps-float", api=lambda ws: _run(ws, chunk_steps=2.5), match=r"chunk_steps"),
    Case("rollapi-blowup-nan", api=lambda ws: _run(ws, blowup=float("nan")), match=r"blowup"),
    Case("rollapi-n-traj-zero", api=lambda ws: _run(ws, n_traj=0), match=r"n_traj"),
    Case("rollapi-traj-strings", api=lambda ws: _run(ws, n_traj=None, traj=["a"]), match=r"traj"),
    Case("rollapi-traj-out-of-range", api=lambda ws: _run(ws, n_traj=None, traj=[-1]), match=r"traj"),
    Case("rollapi-model-truncated", api=lambda ws: _run(ws, models=[ws.truncated_pt]), match=r"truncated\.pt"),
    Case("rollapi-model-foreign", api=lambda ws: _run(ws, models=[ws.foreign_pt]), match=r"foreign\.pt"),
    Case("rollapi-model-zeros", api=lambda ws: _run(ws, models=[("z", ws.zeros_pt)]), match=r"zeros\.pt"),
    Case("rollapi-model-object", api=lambda ws: _run(ws, models=[("x", object())]), match=r"(?i)model"),
    Case("rollapi-model-bad-entry", api=lambda ws: _run(ws, models=[42]), match=r"models"),
    Case("rollapi-integrators-comma-string", api=lambda ws: _run(ws, integrators="rk4,euler"), match=r"comma"),
    Case("rollapi-data-rollout", api=lambda ws: _run(ws, data=ws.rollout), match=r"rollout\.h5"),
    Case("rollapi-data-nan", api=lambda ws: _run(ws, data=ws.nan, n_traj=None, traj=[2]), match=r"nan\.h5"),
    Case("rollapi-data-inf-all", api=lambda ws: _run(ws, data=ws.inf, n_traj=None), match=r"inf\.h5"),
    Case("rollapi-volume-string", api=lambda ws: _run(ws, volume="yes"), match=r"volume"),
    Case("rollapi-read-rollout-data", api=lambda ws: _read_rollout(ws.data), match=r"data\.h5"),
    Case("rollapi-read-rollout-text", api=lambda ws: _read_rollout(ws.text), match=r"notes\.txt"),
    Case("rollapi-read-rollout-empty", api=lambda ws: _read_rollout(ws.empty), match=r"empty\.h5"),
    Case("rollapi-read-rollout-dir", api=lambda ws: _read_rollout(ws.dir), match=r"adir"),
    Case("rollapi-read-rollout-traj", api=lambda ws: _read_rollout(ws.rollout, traj=[99]), match=r"traj"),
    Case("rollapi-read-rollout-max-points", api=lambda ws: _read_rollout(ws.rollout, max_points=0),
         match=r"max_points"),
    Case("rollapi-window-empty", api=lambda ws: _rollout(_rk4(), np.zeros((0, 3)), 0.1, 10), match=r"window0"),
    Case("rollapi-window-wrong-dim", api=lambda ws: _rollout(_rk4(), np.zeros((2, 4)), 0.1, 10), match=r"window0"),
    Case("rollapi-window-nan", api=lambda ws: _rollout(_rk4(), np.full((2, 3), np.nan), 0.1, 10), match=r"window0"),
    Case("rollapi-n-steps-zero", api=lambda ws: _rollout(_rk4(), _w0(), 0.1, 0), match=r"n_steps"),
    Case("rollapi-n-steps-float", api=lambda ws: _rollout(_rk4(), _w0(), 0.1, 2.5), match=r"n_steps"),
    Case("rollapi-dt-nan", api=lambda ws: _rollout(_rk4(), _w0(), float("nan"), 10), match=r"dt"),
    Case("rollapi-chunk-steps-zero", api=lambda ws: _rollout(_rk4(), _w0(), 0.1, 10, chunk_steps=0),
         match=r"chunk_steps"),
    Case("rollapi-blowup-zero", api=lambda ws: _rollout(_rk4(), _w0(), 0.1, 10, blowup=0), match=r"blowup"),
    Case("rollapi-step-map-string", api=lambda ws: _rollout("rk4", _w0(), 0.1, 10), match=r"StepMap"),
    Case("rollapi-n-steps-huge", api=lambda ws: _rollout(_rk4(), _w0(), 0.1, 10**12), match=r"(?i)memory"),
    Case("rollapi-stream-bad-sink", api=lambda ws: _stream(_rk4(), _w0(), 0.1, 10, 42), match=r"sink"),
    Case("rollapi-model-step-object", api=lambda ws: _model_step(object()), match=r"dim"),
    Case("rollapi-model-step-device", api=lambda ws: _model_step(_model(ws), device="tpu"), match=r"tpu"),
    Case("rollapi-model-step-scalar-batch", api=lambda ws: _model_step(_model(ws), scalar_max_batch=-1),
         match=r"scalar_max_batch"),
    Case("rollapi-model-window-short", api=lambda ws: _rollout(_model_step(_model(ws)), _w0(), 0.1, 10),
         match=r"window0"),
    Case("rollapi-integrator-step-unknown", api=lambda ws: _integrator_step("rigid_body", "nope", 0.1), match=r"nope"),
    Case("rollapi-integrator-step-dt-zero", api=lambda ws: _integrator_step("rigid_body", "rk4", 0.0), match=r"dt"),
    Case("rollapi-load-config-hdf5", api=lambda ws: _load_cfg(ws.data), match=r"data\.h5"),
    Case("rollapi-load-config-unknown-key", api=lambda ws: _load_cfg(ws.rollout_toml, bogus=1), match=r"bogus"),
    Case("rollapi-initial-window-method", api=lambda ws: _initial_window("rigid_body", _w0(), 0.1, 3, method="nope"),
         match=r"nope"),
    # issue 58: one rule for repeated names in list options; RUN@METHOD says which part is wrong
    _r("rollout-integrators-repeated", ["--integrators", "rk4,gauss_legendre4,rk4"],
       r"--integrators: 'rk4' is given twice; give each once"),
    _r("rollout-traj-repeated", ["--traj", "1,2,1"], r"--traj: 1 is given twice; give each once"),
    _r("rollout-run-at-unknown-method", ["--model", "{run}@dopri5"],
       r"--model: .*run@dopri5: the run .*run exists, but 'dopri5' after '@' is no integrator"),
    _r("rollout-run-at-near-method", ["--model", "{run}@rk5"], r"'rk5' after '@' .*\(did you mean 'rk4'\?\)"),
]
