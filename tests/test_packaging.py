"""What a pip user gets: the configs and specs found by name (in a checkout and in an installed wheel), the
TOML reader that works on Python 3.10, the files that say how to cite and license the package."""

from __future__ import annotations

import ast
import importlib.metadata
import re
from pathlib import Path

import pytest

import vpintegrator
from vpintegrator import _shipped
from vpintegrator._toml import tomllib
from vpintegrator.errors import VPIntegratorError

PACKAGE = Path(vpintegrator.__file__).resolve().parent
CHECKOUT = PACKAGE.parent if (PACKAGE.parent / "pyproject.toml").is_file() else None
needs_checkout = pytest.mark.skipif(CHECKOUT is None, reason="repository files (not in the installed wheel)")


def test_toml_is_read_through_one_module():
    """``tomllib`` is Python >= 3.11; everything else, the tests included (CI runs them on 3.10), imports it
    from vpintegrator._toml (tomli on 3.10)."""
    tests = Path(__file__).resolve().parent
    direct = []
    for path in sorted([*PACKAGE.rglob("*.py"), *tests.rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module] if isinstance(node, ast.ImportFrom) and node.module and not node.level else [])
            if any(n.split(".")[0] in ("tomllib", "tomli") for n in names):
                direct.append(str(path.relative_to(PACKAGE if path.is_relative_to(PACKAGE) else tests.parent)))
    assert sorted(set(direct)) == ["_toml.py"]


def _requirements() -> list[str]:
    if CHECKOUT is not None:
        return tomllib.loads((CHECKOUT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["dependencies"]
    return importlib.metadata.requires("vpintegrator") or []


def _requirement(name: str) -> list[str]:
    return [r for r in _requirements() if re.split(r"[\s<>=!~;\[]", r, maxsplit=1)[0].lower() == name]


def test_tomli_is_a_dependency_below_python_311():
    tomli = _requirement("tomli")
    assert len(tomli) == 1 and re.search(r"python_version\s*<\s*['\"]3\.11['\"]", tomli[0]), tomli


def test_tomli_w_writes_toml_on_every_python():
    """``config.dump_toml`` writes through tomli-w: an unconditional dependency."""
    tomli_w = _requirement("tomli-w")
    assert len(tomli_w) == 1 and "python_version" not in tomli_w[0], tomli_w


def test_every_shipped_config_is_found_by_name_and_valid():
    from vpintegrator.training import TrainConfig, list_configs

    names = list_configs()
    assert {"tiny", "rigid_body_vpt", "rigid_body_vpt_lm", "study/rigid_body_vpt", "study/coupled_oscillator_vpt"} <= set(names)
    for name in names:
        config = TrainConfig.from_toml(name)
        assert config.model.get("name"), name


def test_a_wheel_finds_its_own_copy_and_a_checkout_wins(tmp_path, monkeypatch):
    """Installed (no configs/ beside the package): vpintegrator/_configs; in a checkout: configs/."""
    package = tmp_path / "site" / "vpintegrator"
    (package / "_configs" / "study").mkdir(parents=True)
    (package / "_configs" / "mine.toml").write_text("# packaged\nepochs = 1\n")
    (package / "_configs" / "study" / "other.toml").write_text("epochs = 2\n")
    monkeypatch.setattr(_shipped, "PACKAGE", package)
    assert _shipped.list_configs() == ["mine", "study/other"]
    assert _shipped.config_path("mine") == package / "_configs" / "mine.toml"
    assert _shipped.shipped_file("configs/study/other.toml") == package / "_configs" / "study" / "other.toml"
    assert _shipped.config_description(_shipped.config_path("mine")) == "packaged"
    with pytest.raises(VPIntegratorError, match=r"it ships with the package: give the name 'mine'"):
        _shipped.config_path("configs/mine.toml")
    (tmp_path / "site" / "configs").mkdir()
    (tmp_path / "site" / "configs" / "mine.toml").write_text("epochs = 3\n")
    assert _shipped.config_path("mine") == tmp_path / "site" / "configs" / "mine.toml"
    assert _shipped.shipped_file("configs/study/other.toml") == package / "_configs" / "study" / "other.toml"


def test_a_path_still_works_and_wins_over_a_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tiny").write_text("epochs = 1\n")
    assert _shipped.config_path("tiny") == Path("tiny")
    assert _shipped.config_path(tmp_path / "tiny") == tmp_path / "tiny"


def test_the_studies_find_their_configs():
    from vpintegrator._shipped import config_path
    from vpintegrator.studies import rigid_body, rigid_body_quality
    from vpintegrator.studies.compare import load_preset, presets

    for rows in (load_preset(name).get("train", {}) for name in presets()):  # the presets' study configs
        assert all(config_path(row["config"]).is_file() for row in rows.values() if "config" in row), rows
    assert Path(rigid_body.STUDY.parse(["--out", "x"]).config_dir, "rigid_body_vpt.toml").is_file()
    assert Path(rigid_body_quality.STUDY.parse(["--out", "x"]).config).is_file()


def test_specs_ship_too():
    from vpintegrator.data import list_specs, load_spec

    assert "rigid_body_paper" in list_specs()
    assert load_spec("rigid_body_paper").system == "rigid_body"


@needs_checkout
def test_license_citation_changelog():
    assert "MIT License" in (CHECKOUT / "LICENSE").read_text() and "the vpintegrator developers" in (CHECKOUT / "LICENSE").read_text()
    citation = (CHECKOUT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in citation and "2312.11166" in citation and "ESAIM" in citation
    assert (CHECKOUT / "CHANGELOG.md").read_text().startswith("# Changelog")
    readme = (CHECKOUT / "README.md").read_text()
    assert "```bibtex" in readme and "2312.11166" in readme
    project = tomllib.loads((CHECKOUT / "pyproject.toml").read_text())["project"]
    assert project["urls"] and any("Python :: 3.10" in c for c in project["classifiers"])
    # PEP 639 (issue 88): an SPDX expression and the file it names, no License classifier beside it
    assert project["license"] == "MIT" and project["license-files"] == ["LICENSE"]
    assert not [c for c in project["classifiers"] if c.startswith("License ::")]
