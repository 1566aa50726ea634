"""kstore on Spark: a Python data source named ``kstore`` and the export job around it.

Imports only the segment core, the codecs, pyspark and pyarrow (never click or rich),
so it is light on executors. :func:`register` is all a user's own job needs::

    from kstore_cli.spark import register
    register(spark)
    spark.read.format("kstore").option("includeHeaders", "true").load("/var/lib/kafka/data")
"""

from __future__ import annotations

import importlib.machinery
import os
import sys
import tempfile
import zipfile
from typing import Dict, Optional

#: What `kstore spark-export` and `import kstore_cli.spark` say when pyspark or pyarrow is missing
#: (they are the `spark` extra: a plain `pip install kstore-cli` leaves out their ~660 MB).
SPARK_EXTRA_HINT = "pip install 'kstore-cli[spark]'"


def require_dependencies(needed: tuple = ("pyarrow",)) -> None:
    """MissingDependencyError (exit 3) when one of `needed` is not installed; it names every missing one
    of pyspark and pyarrow. Importing this package needs pyarrow only (``--engine arrow`` runs without
    pyspark); the Spark engine asks for both before it starts."""
    import importlib.util

    from kstore_cli.errors import MissingDependencyError

    def installed(name: str) -> bool:
        # find_spec, not import: importing pyspark costs ~0.3 s, and options are checked before Spark starts
        try:
            return importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # a finder that refuses it; a half-removed sys.modules entry
            return False

    missing = [name for name in ("pyspark", "pyarrow") if not installed(name)]
    if set(missing) & set(needed):
        error = MissingDependencyError(
            f"spark-export (kstore_cli.spark) needs {' and '.join(missing)}, not installed here; install "
            f"kstore's spark extra: {SPARK_EXTRA_HINT} (from a source checkout: pip install '.[spark]')"
        )
        error.name = missing[0]  # ImportError's attribute: the module that could not be found
        raise error


require_dependencies()

_ZIP_CACHE: dict = {}


class _ZippedExtensionFinder:
    """Loads kstore's native extensions (the record decoder) when kstore runs from the shipped zip.

    Python cannot load an extension module out of a zip, so an executor running kstore from
    ``kstore_cli.zip`` would silently use the pure-Python decoder (~10x slower per record).
    This finder, put first on ``sys.meta_path`` when this package is imported from a zip (on
    executors, before the record decoder is first imported), copies the wanted extension out
    of the zip into a private temporary directory and loads it from there; the copy is deleted
    as soon as it is loaded. Only extensions built for this interpreter (``EXTENSION_SUFFIXES``)
    are offered: when none fits, or loading fails, the import fails as it did before and the
    pure-Python twin is used.
    """

    def __init__(self, archive: str, members: Dict[str, str]) -> None:
        self.archive = archive
        self.members = members  # module name -> member path in the zip

    def find_spec(self, fullname, path=None, target=None):
        member = self.members.get(fullname)
        if member is None:
            return None
        import importlib.util
        import shutil

        directory = tempfile.mkdtemp(prefix="kstore-native-")
        try:
            copy = os.path.join(directory, os.path.basename(member))
            with zipfile.ZipFile(self.archive) as zf, zf.open(member) as src, open(copy, "wb") as dst:
                shutil.copyfileobj(src, dst)
        except (OSError, KeyError, zipfile.BadZipFile):
            shutil.rmtree(directory, ignore_errors=True)
            return None
        return importlib.util.spec_from_file_location(fullname, copy, loader=_TemporaryExtensionLoader(fullname, copy))


class _TemporaryExtensionLoader(importlib.machinery.ExtensionFileLoader):
    """An extension loader that deletes its file (and directory) once the module is loaded."""

    def create_module(self, spec):
        import shutil

        try:
            return super().create_module(spec)
        finally:
            shutil.rmtree(os.path.dirname(self.path), ignore_errors=True)


def _install_zipped_extension_finder() -> None:
    import zipimport

    import kstore_cli

    loader = getattr(kstore_cli, "__loader__", None)
    if not isinstance(loader, zipimport.zipimporter) or any(
            isinstance(f, _ZippedExtensionFinder) for f in sys.meta_path):
        return
    archive = loader.archive
    members: Dict[str, str] = {}
    try:
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
    except (OSError, zipfile.BadZipFile):
        return
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:  # most specific first
        for name in names:
            if name.startswith("kstore_cli/") and name.endswith(suffix):
                module = name[: -len(suffix)].replace("/", ".")
                members.setdefault(module, name)
    if members:
        sys.meta_path.insert(0, _ZippedExtensionFinder(archive, members))


_install_zipped_extension_finder()


def package_zip(directory: Optional[str] = None) -> str:
    """A zip of the kstore_cli package as it runs here (for ``addPyFile``); built once per process."""
    import kstore_cli

    root = os.path.dirname(os.path.abspath(kstore_cli.__file__))
    if root in _ZIP_CACHE and os.path.exists(_ZIP_CACHE[root]):
        return _ZIP_CACHE[root]
    directory = directory or tempfile.mkdtemp(prefix="kstore-pyfiles-")
    path = os.path.join(directory, "kstore_cli.zip")
    parent = os.path.dirname(root)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for folder, dirs, files in os.walk(root):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            for name in sorted(files):
                if name.endswith((".pyc", ".pyo")):
                    continue  # native extensions (.so) go in: _ZippedExtensionFinder loads them on executors
                full = os.path.join(folder, name)
                zf.write(full, os.path.relpath(full, parent))
    _ZIP_CACHE[root] = path
    return path


def register(spark, *, ship: bool = True) -> None:
    """Register the ``kstore`` data source with a session and ship kstore's code to its executors.

    With ``ship`` the package goes to every executor as a zip (``SparkContext.addPyFile``),
    so nothing needs to be installed on the nodes but pyspark's own Python dependencies,
    pyarrow and kstore's codec libraries.
    """
    require_dependencies(("pyspark", "pyarrow"))
    from kstore_cli.spark.source import KstoreDataSource

    if ship:
        spark.sparkContext.addPyFile(package_zip())
    spark.dataSource.register(KstoreDataSource)


__all__ = ["package_zip", "register", "require_dependencies"]
