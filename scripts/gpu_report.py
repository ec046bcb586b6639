"""Write ``gpu_report.md`` from what ``scripts/gpu_check.sh`` left in its output directory.

    python scripts/gpu_report.py OUT_DIR

OUT_DIR holds, for each step run (``gpu_check.sh --only STEP``, one device call or several; copy the files
every call brought back into one directory), ``STEP.tsv`` (one line: name, exit status, seconds, commands)
and ``STEP.log`` (a header naming the machine, then everything the step printed), and the GPU tests' JUnit
file ``pytest_gpu.xml`` and the LM run's ``lm_cuda.csv``.
The report gives every step's exit status, every GPU test's outcome, and each figure beside its target
(issues 24 and 47):

- P2g: paper VPT, Adam, batch 16 384, float32: >= 300 epochs/s (the fast path; the paper: 23 on an RTX
  4090), and the CUDA-graph step against the eager step in the same run;
- P2e: an ensemble of 64 seeds: >= 5 000 model-epochs/s;
- P4: rollout of 10^6 initial conditions on the device: >= 10^9 state-steps/s (model steps); the whole
  ``run_rollouts`` at the speed of its file I/O (device s / I/O s = 1);
- Levenberg–Marquardt on CUDA: training loss <= 5e-4 (seconds to reach it);
- DDP (``scripts/ddp_check.py``): equal to the one-process run, at world size 1 (NCCL) and 2 (Gloo);
- CPU/GPU parity of losses and rollouts (``scripts/gpu_parity.py``): its lines as printed.

A figure the logs do not hold is reported as missing, never guessed. Exit status 1 when a step failed or a
GPU test did not pass (targets missed are reported, not failures).
"""

from __future__ import annotations

import argparse
import csv
import os
import platform
import re
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

TRAIN_TARGET = 300.0  # epochs/s, paper VPT, Adam, batch 16384, float32, one H100
ENSEMBLE_TARGET = 5000.0  # model-epochs/s, 64 seeds
ROLLOUT_TARGET = 1e9  # state-steps/s, 10^6 initial conditions, model steps on the device
ROLLOUT_ICS = 10**6
LM_TARGET = 5e-4  # training loss


@dataclass
class Step:
    name: str
    rc: int | None  # None: not run (no STEP.tsv)
    seconds: int
    command: str

    @property
    def status(self) -> str:
        if self.rc is None:
            return "not run"
        if self.rc == 0:
            return "ok"
        return "timed out" if self.rc in (124, 137) else f"FAILED (exit {self.rc})"


# gpu_check.sh's steps in its order (scripts/gpu_check.sh --list); the report lists steps in this order
STEP_ORDER = ["env", "pytest_gpu", "train", "parity", "ensemble", "rollout", "ddp", "compile", "lm", "rollout_io"]


def read_steps(out: Path) -> dict[str, Step]:
    """Every step's status line (each step's own ``STEP.tsv``), in gpu_check.sh's order."""
    lines: list[str] = []
    for path in sorted(out.glob("*.tsv"), key=lambda p: (
            STEP_ORDER.index(p.stem) if p.stem in STEP_ORDER else len(STEP_ORDER), p.stem)):
        lines += path.read_text().splitlines()
    steps = {}
    for line in lines:
        parts = line.split("\t")
        if len(parts) == 4 and parts[1].lstrip("-").isdigit() and parts[2].isdigit():
            steps[parts[0]] = Step(parts[0], int(parts[1]), int(parts[2]), parts[3])
    return steps


def _log(out: Path, *names: str) -> str:
    """The logs of the steps ``names``, one after the other ("" for a log not there)."""
    paths = [out / f"{name}.log" for name in names]
    return "\n".join(p.read_text(errors="replace") for p in paths if p.exists())


def pytest_results(xml: Path) -> list[tuple[str, str, str]]:
    """(test id, outcome, first line of the reason) of every test in a JUnit file; [] without one."""
    if not xml.exists():
        return []
    rows = []
    for case in ET.parse(xml).getroot().iter("testcase"):
        test = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "FAILED", "error": "ERROR", "skipped": "skipped"}[tag]
                why = (node.get("message") or "").strip().splitlines()[0:1]
                why = why[0][:160] if why else ""
                break
        rows.append((test, outcome, why))
    return rows


def train_figures(log: str) -> list[tuple[str, str, float]]:
    """(fast_step asked, what ran, epochs/s) per line ``ours, fast_step=X (ran: Y)  R epochs/s`` of bench_train."""
    pattern = re.compile(r"^ours, fast_step=(\S+) \(ran: (.*?)\)\s+([\d.]+) epochs/s", re.MULTILINE)
    return [(m[1], m[2], float(m[3])) for m in pattern.finditer(log)]


def ensemble_figures(log: str) -> list[tuple[int, float, str]]:
    """(members, model-epochs/s, what ran) per ``N = k: ensemble R model-epochs/s (fast_step ran: Y)`` line."""
    pattern = re.compile(r"^N =\s*(\d+): ensemble\s+([\d.]+) model-epochs/s \(fast_step ran: (.*?)\), sequential",
                         re.MULTILINE)
    return [(int(m[1]), float(m[2]), m[3]) for m in pattern.finditer(log)]


def rollout_sections(log: str) -> dict[str, list[str]]:
    """The lines of bench_rollout's part (d) sections (i), (ii), (iii): title, header and rows."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in log.splitlines():
        m = re.match(r"^\s*\((i|ii|iii)\) ", line)
        if m:
            current = m[1]
            sections[current] = [line.strip()]
        elif current and line.strip():
            sections[current].append(line.rstrip())
        elif current:
            current = None
    return sections


def rollout_model_rate(section: list[str], ics: int) -> tuple[str, float, float] | None:
    """(fast runner, fast state-steps/s, fast/eager) of the row for ``ics`` initial conditions in section (i)."""
    for line in section[2:]:
        cells = line.split()
        if len(cells) >= 7 and cells[0] == str(ics):
            return cells[1], float(cells[3]), float(cells[6])
    return None


def rollout_io_ratio(section: list[str], ics: int) -> list[tuple[str, float]]:
    """(volume yes/no, device s / I/O s) of the rows for ``ics`` in section (iii)."""
    rows = []
    for line in section[2:]:
        cells = line.split()
        if len(cells) >= 13 and cells[0] == str(ics):
            rows.append((cells[1], float(cells[-1])))
    return rows


def lm_figures(path: Path) -> dict[str, float | None] | None:
    """Seconds to the first epoch with training loss <= 5e-4 (None: not reached), the last training loss and
    the epochs of the LM run whose log.csv is ``path``; None without one."""
    if not path.exists():
        return None
    with path.open() as f:
        rows = list(csv.DictReader(f))
    if not rows:
        return None
    reached = next((float(r["seconds"]) for r in rows if float(r["train_loss"]) <= LM_TARGET), None)
    return {"seconds_to_target": reached, "train_loss": float(rows[-1]["train_loss"]), "epochs": len(rows),
            "seconds": float(rows[-1]["seconds"])}


def _met(value: float | None, target: float) -> str:
    if value is None:
        return "missing"
    return "met" if value >= target else "not met"


def _fmt(value: float | None, digits: int = 4) -> str:
    return "missing" if value is None else f"{value:.{digits}g}"


def _machine(out: Path) -> list[str]:
    """The machines the steps ran on (the header line of each log), else this one's."""
    seen: dict[str, list[str]] = {}
    for path in sorted(out.glob("*.log")):
        m = re.search(r"^gpu_check: machine: (.*)$", path.read_text(errors="replace"), re.MULTILINE)
        if m:
            seen.setdefault(m[1], []).append(path.stem)
    if seen:
        return [f"- {machine} ({', '.join(steps)})" for machine, steps in seen.items()]
    lines = ["- (no step log names its machine; this is the machine writing the report)"]
    lines += [f"- host: {platform.node()}, {platform.machine()}, {os.cpu_count()} CPUs, "
             f"Python {platform.python_version()}"]
    try:
        import torch

        cuda = torch.cuda.is_available()
        name = torch.cuda.get_device_name(0) if cuda else "no CUDA device"
        lines.append(f"- torch {torch.__version__}, CUDA {torch.version.cuda}, {name}"
                     + (f", {torch.cuda.device_count()} device(s)" if cuda else ""))
    except Exception as err:  # noqa: BLE001 -- the report is written whatever broke
        lines.append(f"- torch: {type(err).__name__}: {err}")
    return lines


#: the command a user runs on a CUDA machine of their own (every step, then this report: OUT/gpu_report.md)
OWN_CARD = "bash scripts/gpu_check.sh --all --out runs/gpu_check"


def _opening(steps: dict[str, Step]) -> list[str]:
    """What the page measured, how its steps ended (in words, before the tables), and the command that
    measures a reader's own card."""
    by: dict[str, list[str]] = {}
    for step in steps.values():
        by.setdefault("ok" if step.rc == 0 else "timed out" if step.rc in (124, 137) else
                      "failed" if step.rc is not None else "not run", []).append(step.name)
    absent = [name for name in STEP_ORDER if name not in steps]
    ended = [f"{len(by.get('ok', []))} of {len(steps)} steps run exited 0"]
    if by.get("failed"):
        ended.append(f"FAILED (a check of the step did not hold; its last log lines close this page): "
                     f"{', '.join(by['failed'])}")
    if by.get("timed out"):
        ended.append(f"timed out (killed at the step's limit; the figures it printed before are used): "
                     f"{', '.join(by['timed out'])}")
    if absent:
        ended.append(f"not run in these calls: {', '.join(absent)}")
    return ["What was measured: the package's GPU tests, training speed (the paper VPT, epochs/s; the CUDA-graph "
            "step against eager), ensembles of 1 and 64 seeds, rollouts of up to 10^6 initial conditions on the "
            "device, CPU/GPU parity of losses and rollouts, DDP and Levenberg–Marquardt on CUDA, each against its "
            "target (the table *Figures against the targets*). " + "; ".join(ended) + ".",
            "", f"On your own card: `{OWN_CARD}` (every step within its time limit, `--list` shows them; then this page as "
            "`runs/gpu_check/gpu_report.md`; `--groups` splits the steps into calls of at most 10 minutes)."]


def report(out: Path) -> tuple[str, bool]:
    """The report's markdown and whether everything ran clean (every step exit 0, no GPU test failed)."""
    steps = read_steps(out)
    tests = pytest_results(out / "pytest_gpu.xml")
    lines = ["# GPU check", "", *_opening(steps), "",
             f"Written by `scripts/gpu_report.py` from `{out}` (logs beside it).", ""]
    lines += _machine(out)
    lines += ["", "## Steps", "", "| step | status | seconds | command |", "|---|---|---:|---|"]
    for step in steps.values():
        lines.append(f"| {step.name} | {step.status} | {step.seconds} | `{step.command}` |")
    lines += [f"| {name} | not run | | |" for name in STEP_ORDER if name not in steps]

    lines += ["", "## Figures against the targets", "", "| figure | measured | target | |", "|---|---:|---:|---|"]
    train = train_figures(_log(out, "train", "compile"))
    if not train:
        lines.append("| bench_train: epochs/s | missing | >= 300 | missing |")
    for mode, ran, rate in train:
        fast = mode != "off"
        target = ">= 300" if fast else "(eager baseline; paper 23)"
        lines.append(f"| paper VPT, Adam, batch 16384, float32, fast_step={mode} (ran: {ran}): epochs/s | {rate:.3f} "
                     f"| {target} | {_met(rate, TRAIN_TARGET) if fast else ''} |")
    eager = [rate for mode, _, rate in train if mode == "off"]
    for mode, ran, rate in train:
        if mode != "off" and eager:
            lines.append(f"| fast_step={mode} (ran: {ran}) against the eager step: ratio of epochs/s | "
                         f"{rate / eager[0]:.2f} | | |")
    ensemble = ensemble_figures(_log(out, "ensemble"))
    if not any(n == 64 for n, _, _ in ensemble):
        lines.append("| ensemble of 64 seeds: model-epochs/s | missing | >= 5000 | missing |")
    for n, rate, ran in ensemble:
        target = n == 64
        lines.append(f"| ensemble of {n} seeds (ran: {ran}): model-epochs/s | {rate:.2f} | "
                     f"{'>= 5000' if target else ''} | {_met(rate, ENSEMBLE_TARGET) if target else ''} |")
    sections = rollout_sections(_log(out, "rollout", "rollout_io"))
    model = rollout_model_rate(sections.get("i", []), ROLLOUT_ICS)
    runner, rate, speedup = model if model else ("?", None, None)
    lines.append(f"| rollout of 10^6 ICs, model steps on the device ({runner}): state-steps/s | {_fmt(rate, 3)} | "
                 f">= 1e9 | {_met(rate, ROLLOUT_TARGET)} |")
    if speedup is not None:
        lines.append(f"| rollout of 10^6 ICs, {runner} against eager: ratio of state-steps/s | {speedup:.2f} | | |")
    for volume, ratio in rollout_io_ratio(sections.get("iii", []), ROLLOUT_ICS):
        lines.append(f"| whole run_rollouts, 10^6 ICs, volume {volume}: device s / I/O s | {ratio:.2f} | "
                     "1 (the speed of its file I/O) | |")
    lm = lm_figures(out / "lm_cuda.csv")
    if lm is None:
        lines.append("| Levenberg–Marquardt on CUDA: seconds to training loss <= 5e-4 | missing | reached | "
                     "missing |")
    else:
        reached = lm["seconds_to_target"]
        lines.append(f"| Levenberg–Marquardt on CUDA: seconds to training loss <= 5e-4 (last loss "
                     f"{lm['train_loss']:.3g} after {lm['epochs']} epochs, {lm['seconds']:.0f} s) | "
                     f"{'not reached' if reached is None else f'{reached:.1f}'} | reached (CPU: 51.7 ± 15 s) | "
                     f"{'met' if reached is not None else 'not met'} |")
    ddp = re.findall(r"^ddp_check: DDP over .*$", _log(out, "ddp"), re.MULTILINE)
    for label, pattern in (("NCCL, world size 1", "over nccl, world size 1,"),
                           ("Gloo, world size 2", "over gloo, world size 2,")):
        found = [line for line in ddp if pattern in line]
        lines.append(f"| DDP ({label}) against one process | "
                     f"{found[0].rsplit(': ', 1)[-1] if found else 'missing'} | PASS | |")
    if ddp:
        lines += [""] + [f"`{line}`  " for line in ddp]
    parity = re.findall(r"^parity: .*$", _log(out, "parity"), re.MULTILINE)
    lines += ["", "## CPU/GPU parity (`scripts/gpu_parity.py`)", ""]
    lines += [f"- {line.removeprefix('parity: ')}" for line in parity] or ["missing: no parity log."]

    if sections:
        lines += ["", "## Rollouts at scale (bench_rollout part d: with and without the volume)", "", "```"]
        for key in ("i", "ii", "iii"):
            lines += sections.get(key, []) + [""]
        lines[-1] = "```"

    lines += ["", "## GPU tests (`python -m pytest -m gpu`)", ""]
    if not tests:
        lines.append("No JUnit file (pytest_gpu.xml): the tests did not run.")
    else:
        outcomes = [outcome for _, outcome, _ in tests]
        counts = {o: outcomes.count(o) for o in ("passed", "FAILED", "ERROR", "skipped")}
        lines.append(", ".join(f"{v} {k}" for k, v in counts.items() if v) + ".")
        lines += ["", "| test | outcome | reason |", "|---|---|---|"]
        lines += [f"| {t} | {o} | {w.replace('|', '/')} |" for t, o, w in tests]

    failed = [s for s in steps.values() if s.rc != 0]
    for step in failed:
        tail = _log(out, step.name).strip().splitlines()[-15:]
        lines += ["", f"## {step.name}: {step.status}, last lines of {step.name}.log", "", "```", *tail, "```"]
    clean = bool(steps) and not failed and not any(o in ("FAILED", "ERROR") for _, o, _ in tests)
    lines += ["", f"**{'Clean' if clean else 'Not clean'}**: {len(steps) - len(failed)} of {len(steps)} steps "
              "exited 0" + (f"; GPU tests: {sum(o == 'passed' for _, o, _ in tests)} of {len(tests)} passed"
                            if tests else "") + ".", ""]
    return "\n".join(lines), clean


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the output directory of scripts/gpu_check.sh")
    args = parser.parse_args()
    if not read_steps(args.out):
        print(f"gpu_report: no STEP.tsv in {args.out}: run scripts/gpu_check.sh --only STEP --out {args.out} "
              "first (or copy there the files of each device call)", file=sys.stderr)
        return 2
    text, clean = report(args.out)
    target = args.out / "gpu_report.md"
    from vpintegrator._io import atomic_path

    with atomic_path(target) as tmp:
        tmp.write_text(text)
    print(text)
    print(f"report written to {target}", file=sys.stderr)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
