"""What a comparison run reports: [`RolloutReport`][vpintegrator.rollout.report.RolloutReport] (the files, the table rows, the reference, the
warnings, the table's notes), ``Failure`` (a method that failed: how many trajectories, the first one, its step) and
``identity_notes`` (the learned rows no better than the identity map)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["RolloutReport", "Failure", "identity_notes", "LEARNED_KINDS"]

#: the step-map kinds (``StepMap.kind``, each method's ``kind`` attribute in a rollout file) learnt from data
LEARNED_KINDS = ("model", "fitted")


def identity_notes(rows: list, learned: set[str] | frozenset[str]) -> list[str]:
    """One line per table row of a ``learned`` method (a model, a fitted row: ``LEARNED_KINDS``) whose
    ``vs_identity`` is >= 1 (inf: a failed row): its mean NRMSE over the horizon is no better than the identity
    map's, which holds the last given state."""
    lines = []
    for r in rows:
        ratio = r.get("vs_identity")
        if r.get("method") in learned and ratio is not None and not ratio < 1.0 and ratio == ratio:
            split = f" ({r['split']})" if r.get("split") else ""
            failed = r.get("failed") or 0
            if failed and ratio == float("inf"):  # a blow-up: say so, and how long it held first
                held = f"; valid until vpt = {r['vpt']:.4g}" if r.get("vpt") is not None else ""
                lines.append(f"{r['method']}{split}: {failed} of {r.get('n_traj', '?')} trajectories blew up, so over "
                             f"the horizon it is worse than holding the last given state (mean NRMSE inf){held}")
                continue
            lines.append(f"{r['method']}{split}: worse than the identity map over the horizon: mean NRMSE "
                         f"{r['mean_nrmse']:.3g}, {ratio:.3g}x that of holding the last given state")
    return lines


class Failure(tuple):
    """A failed method: ``(n_failed, traj, step)`` as a tuple (the number of failed trajectories, the
    data-file index of the first one to fail (−1: a held-out condition) and its step), with ``label``,
    ``n_traj``, ``t`` (the time of that step) and ``reason`` (why a row produced nothing, e.g. a fitted row
    without a model; None for blow-ups) as attributes; ``line`` is the one-line report."""

    label: str
    n_traj: int
    t: float
    reason: str | None

    def __new__(cls, label: str, n_failed: int, n_traj: int, traj: int, step: int, t: float,
                reason: str | None = None):
        obj = super().__new__(cls, (n_failed, traj, step))
        obj.label, obj.n_traj, obj.t, obj.reason = label, n_traj, t, reason
        return obj

    @property
    def n_failed(self) -> int:
        return self[0]

    @property
    def traj(self) -> int:
        return self[1]

    @property
    def step(self) -> int:
        return self[2]

    def line(self) -> str:
        if self.reason:  # a row that produced nothing (a fitted row without a model)
            return f"{self.label}: failed, {self.n_failed} of {self.n_traj} trajectories: {self.reason}"
        who = f"trajectory {self.traj}" if self.traj >= 0 else "a held-out condition (no row of the data file)"
        return (f"{self.label}: {self.n_failed} of {self.n_traj} trajectories failed (blow-up or non-finite); "
                f"first: {who} at step {self.step} (t = {self.t:g})")


@dataclass
class RolloutReport:
    """What [`run_rollouts`][vpintegrator.rollout.run.run_rollouts] wrote: the HDF5 file, the metrics table
    (CSV, Markdown; LaTeX beside them, ``latex``) and its rows (one per method and ``split`` label present),
    the reference the errors were measured against and the warning lines.

    ``failures``: label -> ``Failure`` ``(number failed, data-file index of the first failed
    trajectory, its step)``, with ``.t`` its time and ``.line()`` the one-line report.
    """

    out: Any
    csv: Any
    markdown: Any
    rows: list
    failures: dict[str, Any] = field(default_factory=dict)
    #: what the errors were measured against (one line; also the rollout file's ``reference`` attribute)
    reference: str = ""
    #: warning lines (a trajectory rolled out that a model trained on)
    warnings: list = field(default_factory=list)
    #: the lines below the table (in its Markdown; comment lines of its LaTeX): an offset that dominates ‖y‖, the
    #: largest Lyapunov exponent (``lyapunov``), the learned rows worse than the identity map (``identity_notes``)
    notes: list = field(default_factory=list)

    @property
    def latex(self) -> Path:
        """The metrics table as LaTeX (``<stem>.tex``, a booktabs tabular), beside the Markdown."""
        return Path(self.markdown).with_suffix(".tex")

    def __repr__(self) -> str:  # one line: where it went and what ran, not the table
        methods = [r.get("method") for r in self.rows]
        failed = {label: f.n_failed for label, f in self.failures.items()}
        return f"RolloutReport(out={str(self.out)!r}, methods={methods}, failures={failed})"

