"""The README's first command (make a venv, install, dump a bundled segment) works as written, once
installed; its install part was also run for real in a fresh directory (the light task's report)."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys

from tests.conftest import ROOT


def _readme_commands() -> list:
    text = (ROOT / "README.md").read_text()
    block = re.search(r"```sh\n(.*?)```", text, re.S).group(1)
    return [line for line in block.splitlines() if line and not line.startswith("#")]


def test_readme_opens_with_install_and_test_commands() -> None:
    first, second = _readme_commands()[:2]
    # One line that works where the system Python refuses `pip install` (PEP 668, Debian 12): a venv.
    assert first.startswith("python3 -m venv .venv && .venv/bin/pip install . && .venv/bin/kstore ")
    assert "pip install" not in first.split(" && ", 2)[2]
    assert "pytest" in second and "pip install" in second
    ci = (ROOT / ".ci" / "run").read_text()
    assert second in ci  # CI runs exactly the README's test command


def test_readme_dump_command_runs_on_bundled_data() -> None:
    first = _readme_commands()[0]
    kstore_part = first.split(" && ")[-1]
    argv = shlex.split(kstore_part)
    assert argv[0] == ".venv/bin/kstore"
    out = subprocess.run([sys.executable, "-m", "kstore_cli", *argv[1:]], cwd=ROOT, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("Dumping fixtures/")
    assert "| offset: 0 " in out.stdout and "payload: " in out.stdout


def test_the_layout_map_names_every_module() -> None:
    # The README's map is a newcomer's way in: a module missing from it is a module nobody finds.
    text = (ROOT / "README.md").read_text()
    layout = text[text.index("## Layout"):text.index("## Benchmarks")]
    package = ROOT / "kstore_cli"
    missing = []
    for path in sorted(package.rglob("*.py")) + sorted(package.rglob("*.c")):
        rel = path.relative_to(package)
        if path.name == "__init__.py" or rel.parts[0] in ("commands", "parsers", "codecs", "spark"):
            continue  # those packages are named as a whole
        if path.name not in layout:
            missing.append(str(rel))
    assert not missing, f"modules missing from the README's Layout map: {missing}"
