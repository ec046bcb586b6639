"""Tables as LaTeX beside CSV and Markdown (issue 88, item 5): vp-rollout's metrics table and a study's results,
each a booktabs tabular whose cells read back (``_ % & #`` and the other specials escaped) to the table's values."""

from __future__ import annotations

import math
import re

import pytest
from click.testing import CliRunner

from vpintegrator.data.latex import HEAD, escape, markdown_tables
from vpintegrator.data.summary import read_table, write_table
from vpintegrator.errors import VPIntegratorError

_UNESCAPE = {r"\_": "_", r"\%": "%", r"\&": "&", r"\#": "#", r"\$": "$", r"\{": "{", r"\}": "}",
             r"\textbackslash{}": "\\", r"\textasciitilde{}": "~", r"\textasciicircum{}": "^"}


def _read_tabulars(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Every booktabs tabular of a LaTeX file: (header cells, row cells), unescaped."""
    def cells(line: str) -> list[str]:
        assert line.endswith(r" \\"), line
        parts = re.split(r"(?<!\\)&", line[:-3])
        return [re.sub("|".join(re.escape(k) for k in _UNESCAPE), lambda m: _UNESCAPE[m.group(0)], p.strip())
                for p in parts]

    out = []
    for block in re.findall(r"\\begin\{tabular\}\{(lr*)\}\n(.*?)\n\\end\{tabular\}", text, flags=re.S):
        spec, body = block
        lines = body.split("\n")
        assert lines[0] == r"\toprule" and lines[2] == r"\midrule" and lines[-1] == r"\bottomrule", lines
        head, rows = cells(lines[1]), [cells(line) for line in lines[3:-1]]
        assert all(len(r) == len(head) == len(spec) for r in rows)
        out.append((head, rows))
    return out


def test_a_cell_escapes_the_specials():
    assert escape("a_b 10 % & #1 $x$ {y} ~^ \\") == (r"a\_b 10 \% \& \#1 \$x\$ \{y\} \textasciitilde{}"
                                                      r"\textasciicircum{} \textbackslash{}")
    assert escape("`gle` — σ ≤ 2×") == r"gle --- $\sigma$ $\le$ 2$\times$"


def test_the_metrics_table_writes_a_latex_file_that_reads_back_to_the_csv(tmp_path):
    rows = [{"method": name, "split": "test", "final_rel_error": err, "valid_time": 1.25, "n_traj": 3, "failed": 0}
            for name, err in (("stormer_verlet", 1.2345678e-5), ("a%b&c#d", math.inf), ("rk4", 0.5))]
    stem = tmp_path / "ro"
    write_table(rows, stem, caption="Errors against the exact flow.")
    text = (tmp_path / "ro.tex").read_text()
    assert text.startswith(HEAD + "\n% Errors against the exact flow.\n")
    [(head, cells)] = _read_tabulars(text)
    back = read_table(tmp_path / "ro.csv")
    assert head == list(back[0])
    for row, csv_row in zip(cells, back, strict=True):
        assert row[0] == csv_row["method"] and row[1] == csv_row["split"]
        for cell, value in zip(row[2:], list(csv_row.values())[2:]):
            assert float(cell) == pytest.approx(value, rel=1e-3) or float(cell) == value == math.inf
    assert cells[1][0] == "a%b&c#d" and r"a\%b\&c\#d" in text
    # replaced with the table it belongs to (overwrite), never a .tex of the user's
    write_table(rows[:1], stem, overwrite=True)
    assert len(_read_tabulars((tmp_path / "ro.tex").read_text())[0][1]) == 1
    with pytest.raises(VPIntegratorError, match="already exists"):
        write_table(rows, stem)
    (tmp_path / "paper.tex").write_text("\\documentclass{article}\n")
    with pytest.raises(VPIntegratorError, match="never replaced"):
        write_table(rows, tmp_path / "paper", overwrite=True)
    assert (tmp_path / "paper.tex").read_text() == "\\documentclass{article}\n"
    assert not (tmp_path / "paper.csv").exists() and not (tmp_path / "paper.md").exists()  # nothing half-written


def test_vp_rollout_writes_the_latex_table_beside_csv_and_markdown(tiny_data, tmp_path):
    from vpintegrator.cli.rollout import main

    out = tmp_path / "ro.h5"
    res = CliRunner().invoke(main, ["--data", tiny_data, "--integrators", "rk4,implicit_midpoint", "--t-end", "1",
                                    "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert f"{out.with_suffix('.md')} and {out.with_suffix('.tex')}" in res.output
    [(head, cells)] = _read_tabulars(out.with_suffix(".tex").read_text())
    back = read_table(out.with_suffix(".csv"))
    assert head == list(back[0]) and [(r[0], r[1]) for r in cells] == [(r["method"], r["split"]) for r in back]


def test_a_study_redraw_writes_every_markdown_table_as_latex(tmp_path):
    from vpintegrator.studies.driver import main

    out = tmp_path / "redraw"
    for _ in range(2):  # an earlier redraw (its results.tex too) is drawn over
        assert main("memory", ["--table-only", "--results", "memory/quick", "--out", str(out), "-q"]) == 0
    md, tex = (out / "results.md").read_text(), (out / "results.tex").read_text()
    assert tex == markdown_tables(md) and tex.startswith(HEAD)
    tables = _read_tabulars(tex)
    lines = md.splitlines()
    starts = [i for i, line in enumerate(lines[:-1]) if line.startswith("| ") and lines[i + 1].startswith("|---")]
    assert len(tables) == len(starts) == 1 + 4  # the summary, then a table per case and noise
    for (head, rows), i in zip(tables, starts):
        md_rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines[i + 2:i + 2 + len(rows)]]
        assert head == [c.strip() for c in lines[i].strip("|").split("|")]
        assert [[c.replace("---", "—") for c in r] for r in rows] == md_rows
