"""Bad-input cases for tests/test_bad_inputs.py: one table per area (cases_<area>.py, each a list CASES).

A :class:`Case` is a CLI call (``command`` + ``args``) or a Python API call (``api``), run in a fresh copy
of a workspace of good and bad input files; placeholders ``{name}`` in ``args`` are paths in it (see
:data:`PLACEHOLDERS`). Every case must end in ONE error line (``Error: ...`` from a CLI; a
``VPIntegratorError`` from the API) that matches ``match``, with the expected exit code, no traceback,
and every input file byte-for-byte unchanged (also every file that exists where an output goes: an output
refused by the overwrite rule leaves it as it was, and no lock file stays behind).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

#: placeholder -> what it is (file names relative to the workspace)
PLACEHOLDERS = {
    "data": "data.h5: rigid body, 8 trajectories x 21 states, dt 0.2, rk4 (good)",
    "data_im": "data_im.h5: the same initial conditions by implicit_midpoint (good)",
    "co": "co.h5: coupled oscillator (dim 4), 6 trajectories x 21 states, dt 0.4, implicit_midpoint (good)",
    "nan": "nan.h5: data.h5 with y[2, 5, 1] = NaN",
    "inf": "inf.h5: data.h5 with y[3, 7, 0] = +Inf",
    "unknown_system": "unknown_system.h5: data.h5 with attribute system = 'pendulum'",
    "v0": "v0.h5: data.h5 with schema_version = 0",
    "family_bad": "family_bad.h5: a rigid-body family (vp-gen, [parameters] inertia) whose parameter_dists attribute "
                  "names 'moment', a parameter the system and '/params' do not have",
    "spec": "spec.toml: a good vp-gen spec (rigid body, 4 ICs, t_end 1)",
    "config": "config.toml: a good vp-train config on data.h5 (tiny VPT, 2 epochs, float64, cpu)",
    "rollout_toml": "rollout.toml: a good vp-rollout config (data.h5, rk4)",
    "run": "run/: a finished vp-train run directory (2 epochs) with best.pt, last.pt, log.csv, config.toml",
    "model": "run/best.pt",
    "truncated_pt": "truncated.pt: the first half of run/last.pt",
    "foreign_pt": "foreign.pt: a pickle whose loading would run code (must be refused, never run)",
    "zeros_pt": "zeros.pt: a torch file of the right kind but with a tensor instead of a checkpoint dict",
    "rollout": "rollout.h5: vp-rollout of data.h5 with the run's model and rk4 (and .csv, .md beside it)",
    "text": "notes.txt: a text file",
    "empty": "empty.h5: an empty file",
    "dir": "adir/: an empty directory",
    "out": "out/: a directory for outputs (not hashed); e.g. {out}/x.h5",
    "ws": "the workspace directory itself",
    # outputs that exist: the overwrite rule (tests/bad_inputs/cases_outputs.py)
    "source": "mysys.py: a user's Python module defining a System",
    "foreign_h5": "foreign.h5: an HDF5 file not written by vpintegrator (a dataset 'x', no schema attributes)",
    "other_schema": "other_schema.h5: an HDF5 file with root attribute schema = 'someone-else'",
    "link_data": "link_data.h5: a symbolic link to data.h5",
    "link_rollout": "link_rollout.h5: a symbolic link to rollout.h5",
    "link_model": "link_model.pt: a symbolic link to run/best.pt",
    "link_run": "link_run: a symbolic link to the directory run/",
    "run_foreign": "run_foreign/: a copy of run/ that also holds the user's notes.txt, and the user's log.csv",
    "figs": "figs/: error.pdf, error.png and training.png drawn by matplotlib (as vp-plot draws them)",
    "figs_foreign": "figs_foreign/: error.png and training.png that matplotlib did not draw (the user's own)",
    # results files a study did not write (tests/bad_inputs/cases_study.py)
    "studies": "studies/<case>/unknown_form.json: other_study (another study's JSON), missing_key (a row without "
               "'errors'), wrong_type (a seed 'zero'), errors_text, rows_not_list, unknown_system; "
               "studies/{po,red}_<case>.json: partial_observation and reduction results files that are another "
               "study's, lack a key, hold a string for a number or a row that is not an object; "
               "studies/{rb,rbs,co}_string.json, cx_missing_key.json: the shipped results of rigid_body, "
               "rigid_body_structure, coupled_oscillator (a string for a number) and context (a row without a key)",
}


@dataclass(frozen=True)
class Case:
    """One bad input.

    id : str
        Unique, short, kebab-case (the test id).
    command : str or None
        ``vp-gen``, ``vp-train``, ``vp-rollout``, ``vp-plot`` or ``vp-study`` (its error line is
        ``NAME study: error: ...``, its usage exit code 2); None for an API case.
    args : list of str
        Arguments, with ``{placeholder}`` paths.
    match : str
        Regex searched in the error line (CLI: the line starting ``Error:``; API: ``str(error)``).
    exit_code : int
        1 for errors the library raises, 2 for click usage errors.
    api : callable, optional
        ``api(ws)`` with ``ws`` a namespace of the placeholder paths (``ws.data`` ...); must raise
        ``VPIntegratorError``.
    """

    id: str
    command: str | None = None
    args: list = field(default_factory=list)
    match: str = ""
    exit_code: int = 1
    api: Callable[[Any], Any] | None = None
