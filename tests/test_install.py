"""The light install: pyspark and pyarrow are the `spark` extra, everything but spark-export works
without them, and spark-export / kstore_cli.spark say exactly what to install.

"Without them" is made real in a child interpreter whose import system cannot find pyspark or
pyarrow (a meta path finder that refuses them, as when they are not installed); the same was
checked for real in fresh venvs (see the light task's report).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_LOG = "fixtures/kafka-golden/inputs/codecs-0/00000000000000000000.log"

#: Makes pyspark and pyarrow uninstalled for the rest of the child interpreter.
_WITHOUT_SPARK = """
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('pyspark', 'pyarrow', 'py4j'):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
for name in [m for m in sys.modules if m.split('.')[0] in ('pyspark', 'pyarrow', 'py4j')]:
    del sys.modules[name]
sys.meta_path.insert(0, _NotInstalled())
"""

HINT = "pip install 'kstore-cli[spark]'"


def _run_without_spark(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", _WITHOUT_SPARK + code], capture_output=True, text=True, cwd=ROOT)


def _kstore_without_spark(*argv: str) -> subprocess.CompletedProcess:
    return _run_without_spark(f"import sys\nsys.argv = ['kstore', *{list(argv)!r}]\n"
                              "from kstore_cli.cli import main\nmain()\n")


def test_pyspark_and_pyarrow_are_the_spark_extra() -> None:
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]

    def names(requirements):
        return {r.split(">")[0].split("=")[0].split("[")[0].strip().lower() for r in requirements}

    assert not names(project["dependencies"]) & {"pyspark", "pyarrow"}
    extras = project["optional-dependencies"]
    assert {"pyspark", "pyarrow"} <= names(extras["spark"])
    # the suite tests spark-export and the Kafka oracle runs on pyspark's jars
    assert {"pyspark", "pyarrow"} <= names(extras["test"])


def test_spark_package_import_says_what_to_install() -> None:
    out = _run_without_spark(
        "try:\n    import kstore_cli.spark\nexcept ImportError as exc:\n"
        "    print(type(exc).__name__, exc.name, '|', exc)\nelse:\n    print('imported')\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("MissingDependencyError pyspark | ")
    assert "needs pyspark and pyarrow" in out.stdout and HINT in out.stdout


def test_spark_export_without_spark_is_one_line_exit_3(tmp_path) -> None:
    out = _kstore_without_spark("spark-export", "fixtures/kafka-golden/inputs", "--output", str(tmp_path / "out"))
    assert out.returncode == 3
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and out.stderr.startswith("kstore: error: spark-export "), out.stderr
    assert HINT in out.stderr
    assert not (tmp_path / "out").exists()


def test_spark_export_help_works_without_spark() -> None:
    out = _kstore_without_spark("spark-export", "--help")
    assert out.returncode == 0, out.stderr
    assert "kstore spark-export" in out.stdout


def test_every_other_module_imports_without_spark() -> None:
    """Nothing outside kstore_cli/spark needs pyspark or pyarrow to import."""
    out = _run_without_spark(
        "import pkgutil, importlib, kstore_cli\n"
        "for m in pkgutil.walk_packages(kstore_cli.__path__, 'kstore_cli.'):\n"
        "    if m.name.startswith('kstore_cli.spark') or m.name == 'kstore_cli.__main__':\n"
        "        continue\n"
        "    importlib.import_module(m.name)\n"
        "print('ok')\n"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_dump_segment_runs_without_spark() -> None:
    out = _kstore_without_spark("dump-segment", "--deep-iteration", "--print-data-log", GOLDEN_LOG)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"Dumping {GOLDEN_LOG}\n")
