"""The import contracts of .importlinter (docs/layers.md): kept by the package, and really able to break.

lint-imports runs in a fresh interpreter with the repository root as its working directory (it puts the
working directory first on sys.path, so the checkout's kstore_cli is the one analysed)."""

from __future__ import annotations

import configparser
import shutil
import subprocess
import sys
from pathlib import Path

import grimp

from tests.conftest import ROOT

CONFIG = Path(ROOT) / ".importlinter"
LAYERS = ["kstore_cli.cli", "kstore_cli.commands", "kstore_cli.spark | kstore_cli.dump", "kstore_cli.cleaner",
          "kstore_cli.operations", "kstore_cli.cluster", "kstore_cli.parsers", "kstore_cli.log", "kstore_cli.record",
          "kstore_cli.codecs"]
CORE = {"kstore_cli.record", "kstore_cli.log", "kstore_cli.operations", "kstore_cli.cleaner", "kstore_cli.cluster",
        "kstore_cli.parsers", "kstore_cli.dump", "kstore_cli.spark", "kstore_cli.codecs", "kstore_cli.errors"}


def _lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    code = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"
    return subprocess.run([sys.executable, "-c", code, "--config", str(cwd / ".importlinter"), "--no-cache"],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def _contracts() -> dict:
    parser = configparser.ConfigParser()
    parser.read(CONFIG)
    prefix = "importlinter:contract:"
    return {name[len(prefix):]: parser[name] for name in parser.sections() if name.startswith(prefix)}


def _lines(value: str) -> list:
    return [line.strip() for line in value.splitlines() if line.strip() and not line.strip().startswith("#")]


def test_the_contracts_are_the_documented_ones() -> None:
    contracts = _contracts()
    assert sorted(contracts) == ["acyclic", "core-no-ui", "layers"]
    assert contracts["layers"]["type"] == "layers" and _lines(contracts["layers"]["layers"]) == LAYERS
    assert "exclude_type_checking_imports" not in contracts["layers"]  # TYPE_CHECKING imports count too
    forbidden = contracts["core-no-ui"]
    assert forbidden["type"] == "forbidden" and set(_lines(forbidden["source_modules"])) == CORE
    assert set(_lines(forbidden["forbidden_modules"])) == {"click", "rich"}
    acyclic = contracts["acyclic"]
    assert acyclic["type"] == "acyclic_siblings" and _lines(acyclic["ancestors"]) == ["kstore_cli"]
    assert "depth" not in acyclic and "skip_descendants" not in acyclic  # every level, every package
    assert "ignore_imports" not in acyclic  # no cycle is waived


def test_the_package_keeps_every_contract() -> None:
    out = _lint_imports(Path(ROOT))
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Contracts: 3 kept, 0 broken." in out.stdout, out.stdout


def test_a_forbidden_import_breaks_each_contract(tmp_path: Path) -> None:
    shutil.copy(CONFIG, tmp_path / ".importlinter")
    for source in Path(ROOT, "kstore_cli").rglob("*.py"):
        target = tmp_path / source.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, target)
    with open(tmp_path / "kstore_cli" / "record" / "crc.py", "a") as f:
        f.write("\nfrom kstore_cli.log import names  # noqa: E402 - record -> log: against the layers\n")
    with open(tmp_path / "kstore_cli" / "codecs" / "gzip.py", "a") as f:
        f.write("\nimport click  # noqa: E402 - the core importing click\n")
    with open(tmp_path / "kstore_cli" / "log" / "checkpoint.py", "a") as f:
        f.write("\nimport kstore_cli.log.config  # noqa: E402 - config imports checkpoint: a cycle\n")
    out = _lint_imports(tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Contracts: 0 kept, 3 broken." in out.stdout, out.stdout
    assert "kstore_cli.record.crc -> kstore_cli.log.names" in out.stdout
    assert "kstore_cli.codecs.gzip -> click" in out.stdout
    assert "No cycles are allowed in kstore_cli.log." in out.stdout


def test_no_package_is_imported_by_its_own_submodules() -> None:
    # acyclic_siblings looks between siblings only: a package's __init__ importing a submodule that imports
    # the package back is a cycle it does not see (import the sibling submodule instead).
    graph = grimp.build_graph("kstore_cli", cache_dir=None)
    packages = {m for m in graph.modules if graph.find_children(m)}
    cycles = [(module, package) for module in sorted(graph.modules) for package in packages
              if module.startswith(package + ".") and package in graph.find_modules_directly_imported_by(module)
              and graph.chain_exists(importer=package, imported=module)]
    assert cycles == []
