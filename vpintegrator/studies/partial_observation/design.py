"""What the partial-observation study runs: its systems, approaches, training recipe, step costs and sizes (the
package docstring says why each is what it is)."""

from __future__ import annotations

from typing import Any, Sequence

#: the data step
H = 0.2
#: the horizons of the tables
HORIZONS = (10.0, 100.0)
#: study system -> its vp-gen spec, the observation, the estimation rows' context length
SYSTEMS: dict[str, dict[str, Any]] = {
    "coupled_oscillator": {"spec": "coupled_oscillator_box", "observe": "q", "context_len": 3},
    "rigid_body": {"spec": "rigid_body", "observe": "z1,z2", "context_len": 3},
    # the periodic Toda lattice, N = 50 sites (100 components), observed in the first 4 PSD coordinates fitted on
    # the training split; its 11 training conditions are toda_bump's mu, the held-out ones (toda_bump_heldout's
    # spec) n_test mu between them (heldout_mu; n_train does not apply)
    "toda": {"spec": "toda_bump", "heldout_spec": "toda_bump_heldout", "params": {"N": 50}, "observe": "psd:4",
             "context_len": 3, "fixed": ("parrot",), "exclude": ("fullstate",),
             "note": "Toda: 11 training conditions (toda_bump's mu = 0.30 ... 0.60, N = 50 sites), n_test held-out "
                     "conditions (mu at the midpoints of n_test equal bins of [0.30, 0.60], none a training mu), "
                     "exact flow (DOP853, "
                     "1e-12) to t = 100; observed in the first 4 PSD coordinates (cotangent lift) fitted on the "
                     "training split. No `estimate` row: recovering the 100 components from observed states by "
                     "least squares needs a window of 25 or more states and a 100-unknown problem per condition "
                     "(not built). No `fullstate` row: its Levenberg-Marquardt Jacobian on 100 components "
                     "(204 800 residuals x 7 400 parameters) does not fit this machine's memory. Full state: the "
                     "observed state decoded by the PSD basis (its projection error included), against the exact "
                     "flow."},
}
#: learned approach -> its [model] table (seq_len added per T)
APPROACHES: dict[str, dict[str, Any]] = {
    "vpt": {"name": "vpt", "n_blocks": 4, "L": 4},
    # the VPT with a learned unit-triangular shear across window positions before each attention (volume
    # preserving, not equivariant under reordering the window: docs/guarantees.md)
    "vpt_mix": {"name": "vpt", "n_blocks": 4, "L": 4, "positional": "mixing"},
    "st": {"name": "st"},
    # GML's symplectic transformer (its tutorial's L = 4, n_sympnet = 2): symplectic on the window's observed
    # coordinates taken as (q | p) halves, a structure of the window, not of the observed system's phase space
    "sympt": {"name": "symplectic_transformer", "L": 4, "n_sympnet": 2},
    "delay_mlp": {"name": "delay_mlp", "width": 32, "depth": 2},
    "delay_mlp2": {"name": "delay_mlp", "width": 32, "depth": 2, "increment": "second"},
    "delay_vpff": {"name": "delay_vpff", "n_blocks": 4},
    "fullstate": {"name": "delay_mlp", "width": 32, "depth": 2},
    # the recurrent models at their registry defaults (the memory study's rows): a GRU and a linear recurrent unit
    # read the window one state at a time; opt-in rows (``RECURRENT``), not in the default plan
    "gru": {"name": "gru"},
    "lru": {"name": "lru"},
}
#: the recurrent approaches: rows a user adds with ``--approaches`` (or ``approaches`` in a plan file); the shipped
#: default-size results were made without them, so ``DEFAULTS`` and ``QUICK`` leave them out
RECURRENT = ("gru", "lru")
#: learned approach -> training keys besides ``RECIPE`` (the VPT starts from its weights times 0.3, as the
#: coupled-oscillator study's VPT does: at the default scale it starts at a relative one-window error of 4-8 on
#: observed windows and Levenberg-Marquardt stalls there; the symplectic transformer likewise: a 20-s probe on
#: the coupled oscillator at T = 2 ended at 2.2 from the default scale, 1.1 from 0.3)
TRAINING: dict[str, dict[str, Any]] = {"vpt": {"init_scale": 0.3}, "vpt_mix": {"init_scale": 0.3},
                                       "sympt": {"init_scale": 0.3}}
#: the approaches with attention (their coupling measured), and those whose ablations are rows
ATTENTION = ("vpt", "vpt_mix", "st", "sympt")
ABLATED = ("vpt", "vpt_mix")
#: approaches that need a window of at least this many states (``delay_mlp2`` extrapolates the last two)
MIN_T: dict[str, int] = {"delay_mlp2": 2}
#: approaches trained on the full state (one step, T = 1, every window length ignored): the upper bound
FULL_STATE = ("fullstate",)
#: the observed states the full-state error columns estimate a full state from (least squares on the true flow)
FULL_CONTEXT = 3
#: the seed of the held-out initial conditions (the training file's sampler, another stream)
HELDOUT_SEED = 7919
#: the rows that are not trained (the same for every seed)
FIXED_ROWS = ("estimate+gauss_legendre4", "parrot")
#: the target
TARGET: dict[str, Any] = {"system": "coupled_oscillator", "t": 10.0, "error": 1e-3, "seeds_needed": 4, "of": 5}
#: the delay-coordinate SINDy row: its label, the window T of its delay vectors, its integrator
DELAY_SINDY = ("delay_sindy+rk4", 2, "rk4")
#: the recipe every learned approach gets
RECIPE: dict[str, Any] = {"optimizer": "lm", "lm_windows": 2048, "lm_check_windows": 512, "lm_iters_per_epoch": 10,
                          "lm_resample_every": 10, "lm_lambda": 1e-3, "batch_size": 16384, "dtype": "float64",
                          "monitor": "val_rollout", "val_rollout_steps": 50, "val_rollout_error": "final",
                          "val_fraction": 0.15, "test_fraction": 0.0, "epochs": 100000}
#: (system, approach, T) -> CPU seconds of one epoch (10 Levenberg–Marquardt iterations and the validation
#: rollout) of that training, the median over the shipped default-size runs' epochs (``scripts/step_costs.py``,
#: one thread on the 2-core machine that made them): a budget of ``budget_seconds`` is that many whole epochs
#: (``step_budget``), the same steps on any machine under any load
STEP_COSTS: dict[tuple[str, str, int], float] = {
    ('coupled_oscillator', 'delay_mlp', 1): 3.321,
    ('coupled_oscillator', 'delay_mlp', 2): 3.882,
    ('coupled_oscillator', 'delay_mlp', 4): 4.827,
    ('coupled_oscillator', 'delay_mlp', 8): 6.617,
    ('coupled_oscillator', 'delay_mlp2', 2): 3.741,
    ('coupled_oscillator', 'delay_mlp2', 4): 4.802,
    ('coupled_oscillator', 'delay_mlp2', 8): 6.573,
    ('coupled_oscillator', 'delay_vpff', 1): 0.214,
    ('coupled_oscillator', 'delay_vpff', 2): 0.533,
    ('coupled_oscillator', 'delay_vpff', 4): 3.822,
    ('coupled_oscillator', 'fullstate', 1): 7.153,
    ('coupled_oscillator', 'st', 1): 0.389,
    ('coupled_oscillator', 'st', 2): 0.509,
    ('coupled_oscillator', 'st', 4): 1.012,
    ('coupled_oscillator', 'st', 8): 3.506,
    ('coupled_oscillator', 'sympt', 1): 0.389,
    ('coupled_oscillator', 'sympt', 2): 0.726,
    ('coupled_oscillator', 'sympt', 4): 1.4,
    ('coupled_oscillator', 'sympt', 8): 4.668,
    ('coupled_oscillator', 'vpt', 1): 0.839,
    ('coupled_oscillator', 'vpt', 2): 1.485,
    ('coupled_oscillator', 'vpt', 4): 2.736,
    ('coupled_oscillator', 'vpt', 8): 6.885,
    ('coupled_oscillator', 'vpt_mix', 1): 1.008,
    ('coupled_oscillator', 'vpt_mix', 2): 1.733,
    ('coupled_oscillator', 'vpt_mix', 4): 3.932,
    ('rigid_body', 'delay_mlp', 1): 3.081,
    ('rigid_body', 'delay_mlp', 2): 3.777,
    ('rigid_body', 'delay_mlp', 4): 4.526,
    ('rigid_body', 'delay_mlp', 8): 6.466,
    ('rigid_body', 'delay_mlp2', 2): 3.813,
    ('rigid_body', 'delay_mlp2', 4): 4.486,
    ('rigid_body', 'delay_mlp2', 8): 6.47,
    ('rigid_body', 'delay_vpff', 1): 0.274,
    ('rigid_body', 'delay_vpff', 2): 0.532,
    ('rigid_body', 'delay_vpff', 4): 3.75,
    ('rigid_body', 'fullstate', 1): 5.311,
    ('rigid_body', 'st', 1): 0.373,
    ('rigid_body', 'st', 2): 0.622,
    ('rigid_body', 'st', 4): 1.247,
    ('rigid_body', 'st', 8): 2.892,
    ('rigid_body', 'sympt', 1): 0.396,
    ('rigid_body', 'sympt', 2): 0.679,
    ('rigid_body', 'sympt', 4): 1.53,
    ('rigid_body', 'sympt', 8): 4.564,
    ('rigid_body', 'vpt', 1): 1.071,
    ('rigid_body', 'vpt', 2): 1.615,
    ('rigid_body', 'vpt', 4): 2.869,
    ('rigid_body', 'vpt', 8): 7.224,
    ('rigid_body', 'vpt_mix', 1): 1.289,
    ('rigid_body', 'vpt_mix', 2): 1.842,
    ('rigid_body', 'vpt_mix', 4): 4.033,
    ('toda', 'delay_mlp', 1): 3.623,
    ('toda', 'delay_mlp', 2): 4.353,
    ('toda', 'delay_mlp', 4): 5.965,
    ('toda', 'delay_mlp', 8): 11.689,
    ('toda', 'delay_mlp2', 2): 4.174,
    ('toda', 'delay_mlp2', 4): 6.742,
    ('toda', 'delay_mlp2', 8): 11.692,
    ('toda', 'delay_vpff', 1): 0.267,
    ('toda', 'delay_vpff', 2): 1.57,
    ('toda', 'st', 1): 0.463,
    ('toda', 'st', 2): 0.862,
    ('toda', 'st', 4): 1.798,
    ('toda', 'st', 8): 4.769,
    ('toda', 'sympt', 1): 0.515,
    ('toda', 'sympt', 2): 0.939,
    ('toda', 'sympt', 4): 1.891,
    ('toda', 'sympt', 8): 5.688,
    ('toda', 'vpt', 1): 1.601,
    ('toda', 'vpt', 2): 3.292,
    ('toda', 'vpt', 4): 6.272,
    ('toda', 'vpt', 8): 13.385,
    ('toda', 'vpt_mix', 1): 1.674,
    ('toda', 'vpt_mix', 2): 3.375,
    ('toda', 'vpt_mix', 4): 11.03,
    # the recurrent rows: the median epoch (from the second on) of 4-epoch runs on the default-size data (200
    # trajectories; T = 1 and 4, seed 0, one thread, the 2-core machine at load 3-6); T = 2 and 8 are extrapolated
    # from T = 1 and 4 (``nearest_cost``), the Toda lattice was not measured (its runs need --max-steps)
    ('coupled_oscillator', 'gru', 1): 4.68,
    ('coupled_oscillator', 'gru', 4): 9.095,
    ('coupled_oscillator', 'lru', 1): 8.031,
    ('coupled_oscillator', 'lru', 4): 9.698,
    ('rigid_body', 'gru', 1): 4.701,
    ('rigid_body', 'gru', 4): 5.663,
    ('rigid_body', 'lru', 1): 8.42,
    ('rigid_body', 'lru', 4): 9.883,
}
#: Levenberg–Marquardt iterations (optimiser steps) per epoch of the recipe
STEPS_PER_EPOCH = 10
DEFAULTS: dict[str, Any] = {"n_train": 200, "n_test": 100, "t_train": 20.0, "windows": [1, 2, 4, 8],
                            "budget_seconds": 30.0, "patience": 20,
                            "approaches": [a for a in APPROACHES if a not in RECURRENT],
                            "seeds": [0, 1, 2, 3, 4], "systems": ["coupled_oscillator", "rigid_body"]}
QUICK: dict[str, Any] = {"n_train": 60, "n_test": 30, "t_train": 20.0, "windows": [1, 4], "budget_seconds": 10.0,
                         "patience": 5, "approaches": ["vpt", "vpt_mix", "delay_mlp", "delay_mlp2", "delay_vpff",
                                                    "fullstate"],
                         "seeds": [0, 1], "systems": list(SYSTEMS)}


def windows_of(approach: str, windows: Sequence[int]) -> list[int]:
    """The window lengths ``approach`` is trained at out of ``windows``: T = 1 alone for a full-state approach,
    those >= its ``MIN_T`` otherwise."""
    if approach in FULL_STATE:
        return [1]
    return [int(T) for T in windows if int(T) >= MIN_T.get(approach, 1)]

