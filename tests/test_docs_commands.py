"""The commands the documentation shows run.

One extractor reads every shell command of the README, of every page in docs/ and of the shipped configs'
leading comments (the indented ``#   vp-...`` lines): fenced ``bash``/``sh`` blocks (and a program's lines in
unlabelled blocks), continuation lines joined, comments dropped, ``&&`` and ``;`` split, leading ``VAR=value``,
``nice -n N``, ``time`` and ``/usr/bin/time -v`` stripped. Then:

- every ``vp-gen``/``vp-train``/``vp-rollout``/``vp-study``/``vp-plot`` command is resolved by its own program
  as written, with ``--print-config`` (flags, keys, names and values checked; nothing runs), in an empty
  directory; a template's placeholders (``RUN``, ``S``, a cluster's ``$VAR``) get values (``PLACEHOLDERS``);
- every command is either run by the page runs below or listed in ``NOT_RUN`` with its reason (default suite);
- the partial-observation page's first example runs whole at a tiny size, its sizes shrunk by ``tiny``;
- (marker ``docs_commands``, slow) every page's commands run whole at a tiny size (``tiny``: the one rule that
  shrinks them), in the page's order, in one empty directory per page, after the page's Python blocks that
  they need (``PYTHON_BLOCKS``) and the files the page takes from another page (``PRELUDE``); and every
  ``vp-study NAME --table-only --results FILE`` redraw runs whole. A ``python scripts/X.py`` research script (or
  ``python -m MODULE``) runs in a process of its own, from the checkout's ``scripts/`` (``run_script``), at its
  own small sizes (``tiny``); a ``cp`` copies in the page's directory.

The pages are read from the checkout (``VP_DOCS_ROOT`` names it when the tests run from a copy against an
installed wheel, as CI's wheel step does); with neither, these tests skip.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner


def _docs_root() -> Path | None:
    """The checkout whose pages are read: ``VP_DOCS_ROOT`` (it must hold them), else this file's checkout."""
    named = os.environ.get("VP_DOCS_ROOT")
    if named:
        root = Path(named).resolve()
        if not (root / "mkdocs.yml").is_file():
            raise RuntimeError(f"VP_DOCS_ROOT={named}: no mkdocs.yml there; name the repository's checkout")
        return root
    here = Path(__file__).resolve().parents[1]
    return here if (here / "mkdocs.yml").is_file() else None


CHECKOUT = _docs_root() or Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.skipif(_docs_root() is None, reason="repository files (not in the wheel; VP_DOCS_ROOT "
                                                              "names a checkout)"),
              pytest.mark.usefixtures("one_thread")]

PROGRAMS = ("vp-gen", "vp-train", "vp-rollout", "vp-study", "vp-plot")
#: programs whose lines in an unlabelled block (or a config's comment) are commands too (in a ``bash``/``sh``
#: block every line is one)
SHELL_PROGRAMS = (*PROGRAMS, "python", "pip", "bash", "torchrun", "srun", "sbatch", "export", "cp", "eval")

#: the commands the page runs leave out, and why: ``(page, start) -> reason``, a command matching when it is on
#: ``page`` (``"*"``: any) and its words, joined by spaces, start with ``start``. Everything else a page shows
#: runs (``test_every_docs_command_is_run_or_listed`` holds the two together)
NOT_RUN: dict[tuple[str, str], str] = {
    # what needs more than this machine
    ("docs/cluster.md", "vp-gen rigid_body --n-traj 2000000 --t-end 20 --out ./shared/data/rb.h5 --dask-scheduler"):
        "a dask.distributed scheduler on another host (tcp://scheduler-host:8786)",
    ("docs/cluster.md", "srun torchrun"): "torchrun over the nodes of a Slurm allocation",
    ("docs/training.md", "torchrun --nproc_per_node=2"): "DDP over 2 processes: the 2-core CI box has no room "
                                                         "(scripts/ddp_check.py checks DDP on a GPU machine)",
    ("docs/benchmarks.md", "bash scripts/gpu_"): "the lent GPU machine's setup and checks (CUDA)",
    ("docs/benchmarks.md", "cp FILES_AT/"): "copies the GPU machine's fetched files (FILES_AT: the device tool's)",
    ("docs/benchmarks.md", "python scripts/gpu_report.py"): "reads the GPU machine's files (runs/gpu_check)",
    # what CI itself runs (its readme, wheel and docs steps), not a command of a run
    ("*", "pip install"): "installs the package: CI's readme and wheel steps install it (editable and the wheel)",
    ("*", "python -m pytest"): "the test suite: CI's readme and wheel steps run it",
    ("docs/setup.md", "python scripts/reproduce_rigid_body.py --quick --out runs/quick"):
        "the README's first command word for word: the README page's run of it covers it",
    ("docs/setup.md", "eval"): "shell completion, activated in an interactive shell (tests/test_cli_leftovers.py "
                               "checks the completions it gives)",
}
#: commands that cannot be resolved in an empty directory as written, and why (page, the command's start)
NOT_RESOLVED: dict[tuple[str, str], str] = {
    ("docs/your_own_model.md", "vp-train --data datasets/rb.h5"): "the page's own module mynets.py (its Python block) "
                                                                   "on PYTHONPATH",
}
#: the page's fenced ``python`` blocks (0-based, in page order) its commands need, run before them in the page's
#: directory; a block whose first line names a file (``# mynets.py ...``) is written to that file instead
PYTHON_BLOCKS: dict[str, tuple[int, ...]] = {
    "docs/own_trajectories.md": (0,),  # writes mine.h5
    "docs/your_own_model.md": (0,),  # mynets.py, the model's module
    "docs/sindy.md": (2,),  # writes hh_q.h5 (Hénon–Heiles positions, a data-only file)
}
#: commands run before a page's own, for the files it takes from elsewhere (a study's call of its config reads
#: the data the study writes: here the same vp-gen command at a tiny size)
PRELUDE: dict[str, tuple[str, ...]] = {
    **{f"configs/study/rigid_body_{name}.toml": ("vp-gen rigid_body_paper --method implicit_midpoint --out run/data/im.h5",)
       for name in ("st", "vpff", "vpt", "vpt_arb")},
    **{f"configs/study/rigid_body_{name}.toml": ("vp-gen rigid_body_paper --method dop853 --out run/data/exact.h5",)
       for name in ("lp_transformer", "lpnet", "lpnet_sym", "vpt_sym")},
}


@dataclass(frozen=True)
class Command:
    page: str  # the file, relative to the checkout
    line: int  # the line the command starts on
    argv: tuple[str, ...]  # the program first, environment and nice stripped
    shell: bool = False  # from a bash/sh block (every line a command), not an unlabelled block or a comment

    @property
    def text(self) -> str:
        return " ".join(self.argv)

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}:{' '.join(self.argv[:2])}"


def _unroll(lines: list[str]) -> list[tuple[int, str]]:
    """``(line index, line)`` of a snippet with each ``for VAR in A B ...; do ... done`` loop written out, the
    body once per value with ``$VAR`` (``"$VAR/4"``, ``${VAR}``) replaced."""
    out, i = [], 0
    while i < len(lines):
        loop = re.match(r"\s*for (\w+) in ([^;]+); do\s*$", lines[i])
        if not loop:
            out.append((i, lines[i]))
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "done")
        for value in loop.group(2).split():
            out += [(j, re.sub(r"\$\{?%s\}?" % loop.group(1), value, lines[j])) for j in range(i + 1, end)]
        i = end + 1
    return out


def _split(text: str, page: str, first_line: int, shell: bool = False) -> list[Command]:
    """The commands of a shell snippet starting at ``first_line`` of ``page``."""
    out = []
    numbered = _unroll(text.splitlines())
    lines = [line for _, line in numbered]
    i = 0
    while i < len(lines):
        start, joined = i, lines[i]
        while joined.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            joined = joined.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        if re.match(r"\s*[A-Za-z_]\w*=\$\(", joined):
            continue  # a variable set from a command's output (head=$(...)): the line that reads it is the command
        try:
            tokens = shlex.split(joined, comments=True)
        except ValueError:
            continue  # not a shell line (prose in a block)
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in ("&&", ";", "||"):
                while command and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0])
                                   or command[0] in ("time", "/usr/bin/time", "nice")):
                    wrapper = command.pop(0)
                    if wrapper == "nice" and command[:1] == ["-n"]:
                        command = command[2:]
                    while wrapper != "nice" and "=" not in wrapper and command and command[0].startswith("-"):
                        command.pop(0)  # time's flags (-v)
                if command:
                    out.append(Command(page, first_line + numbered[start][0], tuple(command), shell))
                command = []
            else:
                command.append(token)
    return out


def commands_of(path: Path) -> list[Command]:
    """Every shell command of a Markdown page (its ``bash``/``sh`` blocks) or a config's leading comment."""
    page = str(path.relative_to(CHECKOUT))
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".toml":  # runs of indented comment lines: commands (or prose, which no program starts)
        found, block, first = [], [], 0
        for number, line in enumerate([*text.splitlines(), ""], 1):
            match = re.match(r"#\s{2,}(\S.*)$", line)
            if match:
                first = first or number
                block.append(match.group(1))
            elif block:
                found += _split("\n".join(block), page, first)
                block, first = [], 0
        return found
    found: list[Command] = []
    fence: str | None = None  # the open block's language ("" unlabelled), None outside a block
    for number, line in enumerate(text.splitlines(), 1):
        match = re.match(r"\s*```(\w*)", line)
        if match and fence is None:
            fence, block, first = match.group(1), [], number + 1
        elif match:
            if fence in ("bash", "sh", "shell", ""):  # unlabelled blocks too: only a program's lines are kept
                found += _split("\n".join(block), page, first, shell=fence != "")
            fence = None
        elif fence is not None:
            block.append(line.strip())
    return found


def all_commands() -> list[Command]:
    paths = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md")),
             *sorted((CHECKOUT / "configs").rglob("*.toml"))]
    return [Command(c.page, c.line, concrete(c.argv), c.shell) for p in paths if p.is_file() for c in commands_of(p)]


def is_command(command: Command) -> bool:
    """Whether an extracted line is a command a reader may type (a bash block's line, or a program's line of an
    unlabelled block or a config's comment), not prose or output."""
    return command.shell or command.argv[0] in SHELL_PROGRAMS


def not_run(command: Command) -> str | None:
    """The reason ``NOT_RUN`` gives for leaving the command out, if any."""
    for (page, start), reason in NOT_RUN.items():
        if page in ("*", command.page) and (command.text + " ").startswith(start):
            return reason
    return None


#: a template's placeholders (the configs' comments: how a study calls them; a cluster's shell variables) and the
#: values a run here gives them
PLACEHOLDERS = {"RUN": "run", "S": "0", "T": "2", "SECONDS": "2", "N": "1", "$i": "1",
                "${SLURM_ARRAY_TASK_ID}": "1", "${SLURM_CPUS_PER_TASK}": "1"}


def concrete(argv: tuple[str, ...]) -> tuple[str, ...]:
    """A command with its placeholders given values (``PLACEHOLDERS``, whole tokens and path components) and
    its optional parts (``[--epochs N ...]``) left out."""
    out, optional = [], False
    for token in argv:
        if token.startswith("["):
            optional = True
        if not optional:
            token = "/".join(PLACEHOLDERS.get(part, part) for part in token.split("/"))
            out.append("." + token if token.startswith("/") else token)  # a cluster's /shared/...: here, below
        if token.endswith("]"):
            optional = False
    return tuple(out)


def _main(program: str):
    from vpintegrator.cli import gen, plot, rollout, study, train

    return {"vp-gen": gen.main, "vp-train": train.main, "vp-rollout": rollout.main, "vp-study": study.main,
            "vp-plot": plot.main}[program]


def invoke(argv: tuple[str, ...] | list[str]):
    return CliRunner().invoke(_main(argv[0]), list(argv[1:]))


VP_COMMANDS = [c for c in all_commands() if c.argv and c.argv[0] in PROGRAMS]


def test_the_extractor_finds_the_pages_commands():
    po = [c.argv for c in VP_COMMANDS if c.page == "docs/partial_observation.md"]
    assert po[:3] == [
        ("vp-gen", "coupled_oscillator_box", "--dt", "0.2", "--t-end", "20", "--n-traj", "60", "--out", "co.h5"),
        ("vp-train", "coupled_oscillator_observed_q", "--data", "co.h5", "--out", "runs/mlp2_q"),
        ("vp-rollout", "--data", "co.h5", "--model", "runs/mlp2_q", "--heldout", "20", "--integrators",
         "estimate+gauss_legendre4,parrot", "--fit-on-data", "--out", "ro_q.h5")]
    assert len(VP_COMMANDS) >= 80 and {c.argv[0] for c in VP_COMMANDS} == set(PROGRAMS)
    assert any(c.page == "configs/coupled_oscillator_observed_q.toml" for c in VP_COMMANDS)
    # the environment and nice are not the command
    assert ("vp-study", "partial_observation", "--out", "runs/partial_observation", "--quick") in po


def missing_extra(argv: tuple[str, ...] | list[str]) -> str | None:
    """Why the command cannot run here: it names a dysts flow (``dysts:NAME``) or lists them (``--list dysts``)
    and dysts (the ``dysts`` extra, which CI's docs commands install; the README's test set-up does not) is not
    importable."""
    import importlib.util

    if any(a.split(":")[0] == "dysts" for a in argv) and importlib.util.find_spec("dysts") is None:
        return "names a dysts flow and dysts is not installed (pip install 'vpintegrator[dysts]')"
    return None


def _redraws(argv: tuple[str, ...]) -> bool:
    return argv[0] == "vp-study" and "--table-only" in argv and "--results" in argv


@pytest.mark.parametrize("command", VP_COMMANDS, ids=lambda c: c.id)
def test_every_docs_command_resolves_as_written(command, tmp_path, monkeypatch):
    """The command's flags, keys and names as its program reads them (``--print-config``: nothing runs)."""
    monkeypatch.chdir(tmp_path)
    argv = list(command.argv)
    if missing_extra(argv):
        pytest.skip(missing_extra(argv))
    if "--list" in argv or "--help" in argv or "-h" in argv:
        result = invoke(argv)
    else:
        result = invoke([*argv, "--print-config"])
    reason = NOT_RESOLVED.get((command.page, " ".join(command.argv[:3])))
    if reason:
        pytest.xfail(reason)
    assert result.exit_code == 0, f"{command.page}:{command.line}: {' '.join(command.argv)}\n{result.output[-2000:]}"


# --------------------------------------------------------------------------- runs at a tiny size

#: the sizes a tiny run uses in place of the page's: trajectories (a data set's, a rollout's), held-out conditions,
#: a lattice's or bath's N, seconds of training
TINY_N_TRAJ, TINY_HELDOUT, TINY_N, TINY_SECONDS = 8, 3, 50, 2
#: a family's data (``vp-gen NAME_family``): the trajectories a split by parameters needs. The extrapolation split
#: holds out the outermost test_fraction (10 %) of the parameter box, and up to 2 per parameter (each one's
#: lowest and highest) lie on its edge: with fewer than 11 held out (5 parameters: the coupled oscillator's) the
#: held-out region is the box's edge alone (radius 0.5) and no new pair can be drawn from it
TINY_FAMILY_N_TRAJ = 120
#: vp-rollout's window of the fitted rows, at its smallest (delay SINDy's library grows as (T k)^3: 92 CPU s at
#: the sindy page's T = 8)
TINY_CONTEXT = 3
#: a study's smallest plan, key by key: the sizes (``TINY_STUDY_SIZES``) replace the command's own, the other keys
#: (systems, approaches, windows, noise) only fill in where the command gives none
TINY_STUDY: dict[str, dict[str, str]] = {
    "partial_observation": {"systems": "coupled_oscillator", "approaches": "delay_mlp2", "windows": "2",
                            "n_train": "6", "n_test": "2", "budget_seconds": str(TINY_SECONDS), "max_steps": "2"},
    "unknown_form": {"systems": "coupled_oscillator", "noise": "0", "sweep": "1", "n_train": "10", "n_test": "2",
                     "budget_seconds": str(TINY_SECONDS), "max_steps": "2"},
    "memory": {"systems": "coupled_oscillator", "windows": "1", "approaches": "delay_mlp", "n_train": "5",
               "n_test": "2", "bath_sizes": "8", "budget_seconds": str(TINY_SECONDS), "max_steps": "2"},
    "reduction": {"systems": "toda", "sizes": "8", "floor_dims": "2", "reduced_dims": "2", "autoencoder_sizes": "8",
                  "ladder": "quick", "train_seconds": "1", "repeats": "1", "autoencoder_steps": "5",
                  "max_steps": "2"},
    # the studies of the research scripts (``SCRIPT_STUDIES``)
    "rigid_body": {"models": "vpt", "train_seconds": "1", "max_steps": "2", "n_heldout": "2", "long_t_end": "10",
                   "timing_t_end": "10"},
    "rigid_body_structure": {"models": "lpnet", "train_seconds": "1", "max_steps": "2", "n_heldout": "2",
                             "n_long": "1", "long_t_end": "110"},  # its long horizon must pass t = 100
    "coupled_oscillator": {"n_train": "12", "n_test": "2", "max_steps": "2", "n_steps": "10"},  # a preset of compare
    "context": {"epochs": "1", "n_test": "2"},
    "compare": {"n_train": "10", "n_test": "2", "max_steps": "2", "n_steps": "5"},
}
TINY_STUDY_SIZES = {"n_train", "n_test", "budget_seconds", "max_steps", "bath_sizes", "sizes", "floor_dims",
                    "reduced_dims", "autoencoder_sizes", "train_seconds", "repeats", "autoencoder_steps",
                    "n_heldout", "n_long", "long_t_end", "timing_t_end", "n_steps", "heldout", "train_n_traj",
                    "epochs"}
#: sizes a study's later command reads back in a file name (the partial-observation page trains on the study's
#: runs/po_mid/data/coupled_oscillator_train_n100_t20.h5): the command's own value stays
TINY_STUDY_KEEP = {"partial_observation": {"n_train"}}
#: a study's grid keys: a list the command gives shrinks to its first entry (as ``--seeds`` does)
TINY_STUDY_FIRST = {"systems", "noise", "windows", "approaches", "seeds", "models", "context_lens", "splits"}
#: training keys a tiny run sets (the command's own values of them are dropped)
TINY_TRAIN = {"epochs": "1", "time_limit": str(TINY_SECONDS), "lm_windows": "64", "lm_check_windows": "32"}
#: the repository's research scripts that are a study's command (``scripts/reproduce_*.py`` are ``vp-study
#: NAME``'s one-line wrappers; ``python -m vpintegrator.studies.context`` is ``vp-study context``): the study's
#: tiny plan (``TINY_STUDY``) shrinks them
SCRIPT_STUDIES = {"scripts/reproduce_rigid_body.py": "rigid_body",
                  "scripts/reproduce_rigid_body_structure.py": "rigid_body_structure",
                  "scripts/reproduce_coupled_oscillator.py": "coupled_oscillator",
                  "-m vpintegrator.studies.context": "context"}
#: the other research scripts' size flags at a tiny run, flag by flag: a number caps the command's value (or is
#: added), a text is the value where the command gives none, ``None`` keeps the command's own; a list the
#: command gives (``--models a,b``) shrinks to its first entry either way
TINY_SCRIPTS: dict[str, dict[str, int | str | None]] = {
    "scripts/context_study.py": {"--seeds": "0", "--models": None, "--noise": None, "--epochs": 1, "--n-test": 2},
    "scripts/delay_volume.py": {"--n-traj": TINY_N_TRAJ},
    "scripts/recurrent_probe.py": {"--models": None, "--max-steps": 2, "--n-traj": TINY_N_TRAJ,
                                   "--heldout": TINY_HELDOUT},
    "scripts/attention_why.py": {"--cases": "lm_init0.1", "--seconds": 1, "--t-end": 10},
    "scripts/explore_training.py": {"--lm-n": 64, "--batch": 64, "--lbfgs-n": 64},
    # the lattices at N = 64: Toda's bump at h = 1.2 blows up within 10 Verlet steps at N <= 32
    "scripts/bench_engine.py": {"--repeats": 1, "--t-end": 20, "--call-steps": 50, "--method": "rk4",
                                "--lattice-n": 64, "--lattice-steps": 10, "--fixed-calls": 5},
}
#: explore_training's ``--phases METHOD:BUDGET ...``: each phase's budget at most this many seconds (or steps)
TINY_PHASE = 1
#: seconds a research script may run at its tiny size (a tiny run takes seconds to a minute or two: past this it
#: hangs, and the page fails with the command rather than CI's step with nothing)
SCRIPT_TIMEOUT = 600
#: scripts that rewrite the package's own files: run on a copy of the installed package, which they must leave
#: as it is (the package's files are current)
PACKAGE_WRITERS = {"scripts/write_exports.py"}


def _drop(args: list[str], keys) -> list[str]:
    """``args`` without the flags of ``keys`` (``--time-limit X``) and their ``--set KEY=...`` entries."""
    out, i = [], 0
    flags = {"--" + k.replace("_", "-") for k in keys}
    while i < len(args):
        if args[i] in flags:
            i += 2
        elif args[i] == "--set" and i + 1 < len(args) and args[i + 1].split("=")[0] in keys:
            i += 2
        else:
            out.append(args[i])
            i += 1
    return out


def runs(command: Command) -> bool:
    """Whether the page run runs the command: a vp- program's or a ``python`` research script's (at a tiny
    size), an ``export`` or a ``cp``, unless ``NOT_RUN`` lists it."""
    return command.argv[0] in (*PROGRAMS, "python", "export", "cp") and not_run(command) is None


def _lists_its_conditions(spec: str) -> bool:
    """Whether a vp-gen spec lists its initial conditions (a bump's values of mu, a list of points): their number
    is the spec's, not a count that ``--n-traj`` sets."""
    from vpintegrator.data.spec import load_spec

    try:
        return load_spec(spec).sampler in ("bump", "list")
    except Exception:  # not a spec (the command's own error shows when it runs)
        return False


def script(argv: tuple[str, ...] | list[str]) -> str | None:
    """The research script (``scripts/X.py``) or module (``-m MODULE``) a ``python`` command runs."""
    if argv[0] != "python" or len(argv) < 2:
        return None
    return f"-m {argv[2]}" if argv[1] == "-m" and len(argv) > 2 else argv[1]


def tiny(argv: tuple[str, ...]) -> list[str]:
    """A command at a tiny size: at most ``TINY_N_TRAJ`` trajectories generated (given or not; a family's
    ``TINY_FAMILY_N_TRAJ``) or rolled out, ``TINY_HELDOUT`` held-out conditions, a lattice or bath of at most
    ``TINY_N``; one epoch of training with a few seconds' limit (``TINY_TRAIN``); a study's smallest plan
    (``TINY_STUDY``: its sizes, the first entry of each list of its grid; a research script that is a study's
    command, ``SCRIPT_STUDIES``, by the same plan); a research script's own size flags (``TINY_SCRIPTS``,
    ``TINY_PHASE``); a rollout's fitted rows at the smallest window (``TINY_CONTEXT``); an output an earlier command
    of the page wrote is replaced. The command's own flags, models and rows stay as written."""
    args = list(argv)

    def cap(flag: str, value: int) -> None:  # a size the command gives (a spec's own, e.g. a list of mu, stays)
        if flag in args:
            i = args.index(flag) + 1
            args[i] = str(min(int(float(args[i])), value))

    def cap_set(keys: tuple[str, ...], value: int) -> bool:  # --set KEY=X; whether the command gives one
        found = False
        for i, a in enumerate(args):
            if i and args[i - 1] == "--set" and a.split("=")[0] in keys:
                k, v = a.split("=", 1)
                args[i] = f"{k}={min(int(float(v)), value)}"
                found = True
        return found

    program = args[0]
    if program == "vp-gen" and "--list" not in args:
        n_traj = TINY_FAMILY_N_TRAJ if args[1].endswith("_family") else TINY_N_TRAJ
        cap("--n-traj", n_traj)
        if not cap_set(("n_traj",), n_traj) and "--n-traj" not in args and not _lists_its_conditions(args[1]):
            args += ["--n-traj", str(n_traj)]
        cap_set(("N", "params.N", "system.N"), TINY_N)
        out = Path(args[args.index("--out") + 1]) if "--out" in args else None
        if out is not None and out.is_file():  # the page's alternatives write the same file
            if "--shard" in args:
                out.unlink()  # a sharded run writes its index there last
            else:
                args.append("--overwrite")
        if "--shard" in args and "--chunk-size" not in args:
            args += ["--chunk-size", "1"]  # shards are whole chunks: a few trajectories make enough of them
            n_shards = int(args[args.index("--shard") + 1].split("/")[1])
            if int(args[args.index("--n-traj") + 1]) < n_shards:
                args[args.index("--n-traj") + 1] = str(n_shards)
    elif program == "vp-train":
        args = _drop(args, TINY_TRAIN) + [a for k, v in TINY_TRAIN.items() for a in ("--set", f"{k}={v}")]
        args.append("--quiet")
    elif program == "vp-rollout":
        cap("--heldout", TINY_HELDOUT)
        cap("--n-traj", TINY_N_TRAJ)
        cap("--context-len", TINY_CONTEXT)
        out = Path(args[args.index("--out") + 1]) if "--out" in args else Path("rollout.h5")  # its default
        if out.is_file() and "--shard" not in args:
            args.append("--overwrite")  # the page's alternatives write the same file
        if "--shard" in args and "--traj" not in args:  # a tiny model's test split holds too few for N shards
            args += ["--traj", ",".join(map(str, range(int(args[args.index("--shard") + 1].split("/")[1]))))]
        args.append("--quiet")
    elif program == "python" and script(args) in SCRIPT_STUDIES:  # a study's command: its tiny plan
        head = 3 if args[1] == "-m" else 2
        return args[:head] + tiny(("vp-study", SCRIPT_STUDIES[script(args)], *args[head:]))[2:]
    elif program == "python" and script(args) in TINY_SCRIPTS:
        for flag, value in TINY_SCRIPTS[script(args)].items():
            if flag in args:
                i = args.index(flag) + 1
                args[i] = str(min(int(float(args[i])), value)) if isinstance(value, int) else args[i].split(",")[0]
            elif value is not None:
                args += [flag, str(value)]
        if "--phases" in args:  # explore_training's METHOD:BUDGET ...: TINY_PHASE seconds (or steps: 2s) each
            i = args.index("--phases") + 1
            while i < len(args) and not args[i].startswith("-"):
                method, _, budget = args[i].partition(":")
                steps = budget.endswith("s")
                args[i] = f"{method}:{min(float(budget.rstrip('s')), TINY_PHASE):g}{'s' if steps else ''}"
                i += 1
    elif program == "vp-study" and not _redraws(argv) and not {"--list", "--estimate", "--table-only",
                                                                "--figures-only", "--export"} & set(args):
        plan = TINY_STUDY[args[1]]
        budget = next((args[i + 1] for i, a in enumerate(args[:-1]) if a == "--budget"), "plateau")
        if budget != "plateau":  # a step budget counts under --budget plateau only (refused beside cpu / wall)
            plan = {k: v for k, v in plan.items() if k != "max_steps"}
        given = {a.split("=")[0] for a in args if "=" in a} | {a[2:].replace("-", "_") for a in args if a[:2] == "--"}
        forced = TINY_STUDY_SIZES - TINY_STUDY_KEEP.get(args[1], set())
        args = _drop(args, forced)
        args += [a for k, v in plan.items() if k not in given or k in forced for a in ("--set", f"{k}={v}")]
        args += ["--seeds", "0", "-q"] if "--seeds" not in args else ["-q"]
        for i in range(1, len(args)):  # a grid's list: its first entry
            if args[i - 1][2:].replace("-", "_") in TINY_STUDY_FIRST or (
                    args[i - 1] == "--set" and args[i].split("=")[0] in TINY_STUDY_FIRST):
                args[i] = args[i].split(",")[0]
    return args


def _expand(arg: str) -> list[str]:
    """An argument as the shell gives it: a pattern (``results/rb.shard-*-of-4.h5``) as the paths it matches."""
    import glob

    return sorted(glob.glob(arg)) or [arg] if "*" in arg or "?" in arg else [arg]


def run_script(command: Command, argv: list[str]) -> None:
    """A ``python`` command (at its tiny size) in a process of its own, as the shell runs it: a research script
    from the checkout's ``scripts/`` (the scripts are not installed with the wheel), a module (``-m``) of the
    installed package; one thread, explore_training's cache in the page's directory. A script that rewrites the
    package (``PACKAGE_WRITERS``) runs on a copy of the installed package and must leave every file of it as it
    is (the package's files are current)."""
    import shutil
    import subprocess

    env = {**os.environ, "OMP_NUM_THREADS": "1", "EXPLORE_CACHE": str(Path.cwd() / "explore_cache")}
    program = [sys.executable, *argv[1:]] if argv[1] == "-m" else [sys.executable, str(CHECKOUT / argv[1]), *argv[2:]]
    copy, before = None, {}
    if script(argv) in PACKAGE_WRITERS:
        import vpintegrator

        package = Path(vpintegrator.__file__).parent
        copy = Path.cwd() / "package_copy" / "vpintegrator"
        shutil.copytree(package, copy, ignore=shutil.ignore_patterns("__pycache__"))
        before = {f: f.read_bytes() for f in copy.rglob("*.py")}
        env["PYTHONPATH"] = os.pathsep.join([str(copy.parent), *filter(None, [env.get("PYTHONPATH")])])
    try:
        result = subprocess.run(program, env=env, capture_output=True, text=True, timeout=SCRIPT_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        tail = exc.stderr.decode() if isinstance(exc.stderr, bytes) else exc.stderr or ""
        pytest.fail(f"{command.page}:{command.line}: {' '.join(argv)} ran past {SCRIPT_TIMEOUT} s at its tiny size\n"
                    f"{tail[-3000:]}")
    output = result.stdout + result.stderr
    assert result.returncode == 0, f"{command.page}:{command.line}: {' '.join(argv)}\n{output[-3000:]}"
    if copy is not None:
        changed = [str(f.relative_to(copy)) for f in sorted(copy.rglob("*.py")) if before.get(f) != f.read_bytes()]
        assert not changed, f"{command.page}:{command.line}: {' '.join(argv)} rewrote {changed}\n{output[-3000:]}"
        assert str(copy) in output, f"{' '.join(argv)} did not run on the package's copy {copy}:\n{output[-3000:]}"


def copy_file(argv: list[str]) -> None:
    """``cp SRC... DST`` in the page's directory (a destination's directory, such as the checkout's
    ``docs/data``, is made there: the shipped files are never written)."""
    import shutil

    *sources, target = argv[1:]
    destination = Path(target)
    (destination if len(sources) > 1 or target.endswith("/") else destination.parent).mkdir(parents=True,
                                                                                            exist_ok=True)
    for source in sources:
        shutil.copy(source, destination)


def run_tiny(command: Command) -> None:
    """The command at its tiny size (``tiny``), run by its program in this process (a ``python`` command in its
    own, ``run_script``); a failure names the page's line and the command as run."""
    if command.argv[0] == "cp":
        return copy_file([path for a in command.argv for path in _expand(a)])
    argv = [a.replace("docs/data/", str(CHECKOUT / "docs" / "data") + "/") for a in tiny(command.argv)]
    if argv[0] == "python":
        return run_script(command, [path for a in argv for path in _expand(a)])
    argv = [path for a in argv for path in _expand(a)]
    result = invoke(argv)
    assert result.exit_code == 0, f"{command.page}:{command.line}: {' '.join(argv)}\n{result.output[-3000:]}"


def test_the_partial_observation_page_opens_with_a_model_that_learns_and_runs(tmp_path, monkeypatch):
    """Its first example, whole, at a tiny size; the model is the page's winner (the window MLP giving the
    second difference, T = 4), not the plain VPT."""
    from vpintegrator._toml import tomllib

    monkeypatch.chdir(tmp_path)
    first = [c for c in VP_COMMANDS if c.page == "docs/partial_observation.md"][:3]
    for command in first:
        run_tiny(command)
    config = tomllib.loads((tmp_path / "runs" / "mlp2_q" / "config.toml").read_text())
    assert config["observe"] == "q" and config["optimizer"] == "lm"
    assert {k: config["model"][k] for k in ("name", "increment", "seq_len")} == {
        "name": "delay_mlp", "increment": "second", "seq_len": 4}
    rows = (tmp_path / "ro_q.csv").read_text().splitlines()
    assert {r.split(",")[0] for r in rows[1:]} == {"estimate+gauss_legendre4", "parrot", "mlp2_q"}


@pytest.mark.slow
@pytest.mark.parametrize("command", [c for c in VP_COMMANDS if _redraws(c.argv)], ids=lambda c: c.id)
# (the page runs redraw them too, in their pages' order)
def test_every_docs_redraw_of_a_shipped_file_runs(command, tmp_path, monkeypatch):
    """``vp-study NAME --table-only --results FILE``: the shipped file's tables, drawn whole (seconds each; the
    shipped files' redraws are checked by tests/test_shipped_results.py in the default suite)."""
    monkeypatch.chdir(tmp_path)
    argv = list(command.argv)
    result = invoke([a.replace("docs/data/", str(CHECKOUT / "docs" / "data") + "/") for a in argv])
    assert result.exit_code == 0, f"{command.page}:{command.line}: {' '.join(argv)}\n{result.output[-2000:]}"


def python_blocks(page: str) -> list[str]:
    """The page's fenced ``python`` blocks, in order."""
    blocks, block = [], None
    for line in (CHECKOUT / page).read_text(encoding="utf-8").splitlines():
        if block is None and re.match(r"\s*```python\s*$", line):
            block = []
        elif block is not None and re.match(r"\s*```\s*$", line):
            blocks.append("\n".join(block) + "\n")
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def run_python_block(page: str, index: int, code: str) -> None:
    """A page's Python block in the current directory: written to the file its first line names
    (``# mynets.py ...``), else run as a script."""
    named = re.match(r"#\s*([\w.]+\.py)\b", code)
    if named:
        Path(named.group(1)).write_text(code, encoding="utf-8")
    else:
        exec(compile(code, f"{page} (python block {index})", "exec"), {"__name__": "__main__"})


def export(command: Command, monkeypatch) -> None:
    """``export VAR=value`` (``$PWD`` the page's directory): in the environment, and a ``PYTHONPATH`` on
    ``sys.path`` too (the commands run in this process)."""
    for assignment in command.argv[1:]:
        name, value = assignment.split("=", 1)
        value = value.replace("$PWD", os.getcwd()).replace("${PWD}", os.getcwd())
        monkeypatch.setenv(name, value)
        if name == "PYTHONPATH":
            for entry in reversed(value.split(os.pathsep)):
                monkeypatch.syspath_prepend(entry)


def test_every_docs_command_is_run_or_listed():
    """A command a page shows is run by its page's run below or listed in ``NOT_RUN`` with its reason, and
    every entry of ``NOT_RUN``, ``PYTHON_BLOCKS`` and ``PRELUDE`` still names something on its page."""
    commands = [c for c in all_commands() if is_command(c)]
    neither = [f"{c.page}:{c.line}: {c.text}" for c in commands if not runs(c) and not_run(c) is None]
    assert not neither, "run these at a tiny size (tiny) or list them in NOT_RUN with the reason:\n" + "\n".join(neither)
    studies = {c.argv[1] for c in commands if runs(c) and c.argv[0] == "vp-study" and len(c.argv) > 1
               and not c.argv[1].startswith("-") and not _redraws(c.argv)
               and not {"--list", "--estimate", "--table-only"} & set(c.argv)}
    assert studies <= set(TINY_STUDY), f"studies a page runs without a tiny plan in TINY_STUDY: {studies - set(TINY_STUDY)}"
    stale = [key for key in NOT_RUN if not any(key[0] in ("*", c.page) and (c.text + " ").startswith(key[1])
                                               for c in commands)]
    assert not stale, f"NOT_RUN entries that match no command: {stale}"
    for page, indices in PYTHON_BLOCKS.items():
        assert max(indices) < len(python_blocks(page)), f"{page} has no python block {max(indices)}"
    assert set(PRELUDE) <= {c.page for c in commands}
    # the reasons are written for a reader: one line each, no empty one
    assert all(reason.strip() and "\n" not in reason for reason in NOT_RUN.values())


#: the pages with a command that runs (the page runs' parameters)
RUN_PAGES = sorted({c.page for c in all_commands() if is_command(c) and runs(c)})


@pytest.mark.slow
@pytest.mark.docs_commands
@pytest.mark.parametrize("page", RUN_PAGES)
def test_a_pages_commands_run_in_order_at_a_tiny_size(page, tmp_path, monkeypatch):
    """Every command of the page that ``NOT_RUN`` does not list, in its order, at a tiny size (``tiny``), in one
    empty directory: after the files it takes from elsewhere (``PRELUDE``) and its Python blocks (``PYTHON_BLOCKS``),
    as a reader following the page would."""
    skip = next((missing_extra(c.argv) for c in all_commands() if c.page == page and missing_extra(c.argv)), None)
    if skip:
        pytest.skip(skip)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [sys.argv[0]])
    for text in PRELUDE.get(page, ()):
        run_tiny(Command(page, 0, tuple(shlex.split(text))))
    blocks = python_blocks(page)
    for index in PYTHON_BLOCKS.get(page, ()):
        run_python_block(page, index, blocks[index])
    for command in all_commands():
        if command.page != page or not is_command(command) or not runs(command):
            continue
        if command.argv[0] == "export":
            export(command, monkeypatch)
        else:
            run_tiny(command)
