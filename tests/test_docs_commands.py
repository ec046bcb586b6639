"""The commands the documentation shows run (issue 69).

One extractor reads every shell command of the README, of every page in docs/ and of the shipped configs'
leading comments (the indented ``#   vp-...`` lines): fenced ``bash``/``sh`` blocks, continuation lines joined,
comments dropped, ``&&`` and ``;`` split, leading ``VAR=value``, ``nice -n N``, ``time`` stripped. Then:

- every ``vp-gen``/``vp-train``/``vp-rollout``/``vp-study``/``vp-plot`` command is resolved by its own program
  as written, with ``--print-config`` (flags, keys, names and values checked; nothing runs), in an empty
  directory; a template's placeholders (``RUN``, ``S``, a cluster's ``$VAR``) get values (``PLACEHOLDERS``);
- (slow) every ``vp-study NAME --table-only --results FILE`` redraw runs whole;
- the partial-observation page's first example runs whole at a tiny size, its sizes shrunk by ``tiny``;
- (slow) every command of the partial-observation page and the configs' comments runs at a tiny size, in the
  page's order, in one directory.

Repository files (not in the wheel): against an installed wheel these tests skip.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

CHECKOUT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.skipif(not (CHECKOUT / "mkdocs.yml").is_file(), reason="repository files (not in the wheel)"),
              pytest.mark.usefixtures("one_thread")]

PROGRAMS = ("vp-gen", "vp-train", "vp-rollout", "vp-study", "vp-plot")
#: pages whose commands need more than the commands themselves, and what (a tiny run skips them)
NOT_RUN: dict[str, str] = {
    "docs/own_trajectories.md": "its data file is written by the page's Python block",
    "docs/your_own_model.md": "its model is the page's own module mynets.py (its Python block)",
    **{f"configs/study/{name}.toml": "a study's call of the config: its data (RUN/data) is the study's"
       for name in ("rigid_body_lp_transformer", "rigid_body_lpnet", "rigid_body_lpnet_sym", "rigid_body_st",
                    "rigid_body_vpff", "rigid_body_vpt", "rigid_body_vpt_arb", "rigid_body_vpt_sym")},
}
#: commands that cannot be resolved in an empty directory as written, and why (page, the command's start)
NOT_RESOLVED: dict[tuple[str, str], str] = {
    ("docs/your_own_model.md", "vp-train --data datasets/rb.h5"): "the page's own module mynets.py (its Python block) "
                                                                   "on PYTHONPATH",
}


@dataclass(frozen=True)
class Command:
    page: str  # the file, relative to the checkout
    line: int  # the line the command starts on
    argv: tuple[str, ...]  # the program first, environment and nice stripped

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


def _split(text: str, page: str, first_line: int) -> list[Command]:
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
        try:
            tokens = shlex.split(joined, comments=True)
        except ValueError:
            continue  # not a shell line (prose in a block)
        command: list[str] = []
        for token in [*tokens, ";"]:
            if token in ("&&", ";", "||"):
                while command and (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]) or command[0] == "time"):
                    command.pop(0)
                if command[:1] == ["nice"]:
                    command = command[3:] if command[1:2] == ["-n"] else command[1:]
                if command:
                    out.append(Command(page, first_line + numbered[start][0], tuple(command)))
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
                found += _split("\n".join(block), page, first)
            fence = None
        elif fence is not None:
            block.append(line.strip())
    return found


def all_commands() -> list[Command]:
    paths = [CHECKOUT / "README.md", *sorted((CHECKOUT / "docs").rglob("*.md")),
             *sorted((CHECKOUT / "configs").rglob("*.toml"))]
    return [Command(c.page, c.line, concrete(c.argv)) for p in paths if p.is_file() for c in commands_of(p)]


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


def _redraws(argv: tuple[str, ...]) -> bool:
    return argv[0] == "vp-study" and "--table-only" in argv and "--results" in argv


@pytest.mark.parametrize("command", VP_COMMANDS, ids=lambda c: c.id)
def test_every_docs_command_resolves_as_written(command, tmp_path, monkeypatch):
    """The command's flags, keys and names as its program reads them (``--print-config``: nothing runs)."""
    monkeypatch.chdir(tmp_path)
    argv = list(command.argv)
    if "--list" in argv or "--help" in argv or "-h" in argv:
        result = invoke(argv)
    else:
        result = invoke([*argv, "--print-config"])
    reason = NOT_RESOLVED.get((command.page, " ".join(command.argv[:3])))
    if reason:
        pytest.xfail(reason)
    assert result.exit_code == 0, f"{command.page}:{command.line}: {' '.join(command.argv)}\n{result.output[-2000:]}"


# --------------------------------------------------------------------------- runs at a tiny size

#: the sizes a tiny run uses in place of the page's
TINY_N_TRAJ, TINY_HELDOUT, TINY_SECONDS = 8, 3, 2
#: a study's smallest plan, key by key (a key the command gives stays); a study not here has none that runs in
#: seconds, and its runs are left out of the tiny runs (its commands are resolved above)
TINY_STUDY: dict[str, dict[str, str]] = {
    "partial_observation": {"systems": "coupled_oscillator", "approaches": "delay_mlp2", "windows": "2",
                            "n_train": "6", "n_test": "2", "budget_seconds": str(TINY_SECONDS)},
    "unknown_form": {"systems": "coupled_oscillator", "noise": "0", "sweep": "1", "n_train": "10", "n_test": "2",
                     "budget_seconds": str(TINY_SECONDS)},
}
#: training keys a tiny run sets (the command's own values of them are dropped)
TINY_TRAIN = {"epochs": "1", "time_limit": str(TINY_SECONDS), "lm_windows": "64", "lm_check_windows": "32"}


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


def runs_tiny(argv: tuple[str, ...]) -> bool:
    """Whether ``tiny`` has a tiny size for the command (a study without a tiny plan has none) and it needs
    nothing but this machine (a ``--dask-scheduler`` command needs its cluster)."""
    if "--dask-scheduler" in argv:
        return False
    return argv[0] != "vp-study" or _redraws(argv) or "--list" in argv or "--estimate" in argv or (
        len(argv) > 1 and argv[1] in TINY_STUDY)


def tiny(argv: tuple[str, ...]) -> list[str]:
    """A command at a tiny size: fewer trajectories (``--n-traj``) and held-out conditions (``--heldout``)
    where it gives them; one epoch of training with a few seconds' limit (``TINY_TRAIN``); a study's smallest
    plan (``TINY_STUDY``, one seed); an output an earlier command of the page wrote is replaced. The
    command's own flags, models and rows stay as written."""
    args = list(argv)

    def cap(flag: str, value: int) -> None:  # a size the command gives (a spec's own, e.g. a list of mu, stays)
        if flag in args:
            i = args.index(flag) + 1
            args[i] = str(min(int(float(args[i])), value))

    program = args[0]
    if program == "vp-gen":
        cap("--n-traj", TINY_N_TRAJ)
        out = Path(args[args.index("--out") + 1]) if "--out" in args else None
        if out is not None and out.is_file():  # the page's alternatives write the same file
            if "--shard" in args:
                out.unlink()  # a sharded run writes its index there last
            else:
                args.append("--overwrite")
        if "--shard" in args and "--chunk-size" not in args:
            args += ["--chunk-size", "1"]  # shards are whole chunks: a few trajectories make enough of them
            n_shards = int(args[args.index("--shard") + 1].split("/")[1])
            if "--n-traj" in args and int(args[args.index("--n-traj") + 1]) < n_shards:
                args[args.index("--n-traj") + 1] = str(n_shards)
    elif program == "vp-train":
        args = _drop(args, TINY_TRAIN) + [a for k, v in TINY_TRAIN.items() for a in ("--set", f"{k}={v}")]
        args.append("--quiet")
    elif program == "vp-rollout":
        cap("--heldout", TINY_HELDOUT)
        out = Path(args[args.index("--out") + 1]) if "--out" in args else Path("rollout.h5")  # its default
        if out.is_file() and "--shard" not in args:
            args.append("--overwrite")  # the page's alternatives write the same file
        if "--shard" in args and "--traj" not in args:  # a tiny model's test split holds too few for N shards
            args += ["--traj", ",".join(map(str, range(int(args[args.index("--shard") + 1].split("/")[1]))))]
        args.append("--quiet")
    elif program == "vp-study" and not _redraws(argv) and "--list" not in args and "--estimate" not in args:
        plan = TINY_STUDY[args[1]]
        given = {a.split("=")[0] for a in args if "=" in a} | {a[2:].replace("-", "_") for a in args if a[:2] == "--"}
        args = _drop(args, ["budget_seconds"])
        args += [a for k, v in plan.items() if k not in given or k == "budget_seconds" for a in ("--set", f"{k}={v}")]
        args += ["--seeds", "0", "-q"] if "--seeds" not in args else ["-q"]
        if "--seeds" in argv:
            i = args.index("--seeds") + 1
            args[i] = args[i].split(",")[0]
    return args


def _expand(arg: str) -> list[str]:
    """An argument as the shell gives it: a pattern (``results/rb.shard-*-of-4.h5``) as the paths it matches."""
    import glob

    return sorted(glob.glob(arg)) or [arg] if "*" in arg or "?" in arg else [arg]


def run_tiny(command: Command) -> None:
    argv = [a.replace("docs/data/", str(CHECKOUT / "docs" / "data") + "/") for a in tiny(command.argv)]
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
def test_every_docs_redraw_of_a_shipped_file_runs(command, tmp_path, monkeypatch):
    """``vp-study NAME --table-only --results FILE``: the shipped file's tables, drawn whole (seconds each; the
    shipped files' redraws are checked by tests/test_shipped_results.py in the default suite)."""
    monkeypatch.chdir(tmp_path)
    argv = list(command.argv)
    result = invoke([a.replace("docs/data/", str(CHECKOUT / "docs" / "data") + "/") for a in argv])
    assert result.exit_code == 0, f"{command.page}:{command.line}: {' '.join(argv)}\n{result.output[-2000:]}"


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted({c.page for c in VP_COMMANDS}))
def test_a_pages_commands_run_in_order_at_a_tiny_size(page, tmp_path, monkeypatch):
    """Every vp- command of the page, in its order, in one directory (a study at its smallest plan)."""
    monkeypatch.chdir(tmp_path)
    commands = [c for c in VP_COMMANDS if c.page == page]
    if page in NOT_RUN:
        pytest.skip(NOT_RUN[page])
    for command in commands:
        if runs_tiny(command.argv) and not (command.argv[0] == "vp-study" and "--table-only" in command.argv
                                            and not _redraws(command.argv) and command.argv[1] not in TINY_STUDY):
            run_tiny(command)
