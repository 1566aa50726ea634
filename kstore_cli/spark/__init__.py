"""kstore on Spark: a Python data source named ``kstore`` and the export job around it.

Imports only the segment core, the codecs, pyspark and pyarrow (never click or rich),
so it is light on executors. :func:`register` is all a user's own job needs::

    from kstore_cli.spark import register
    register(spark)
    spark.read.format("kstore").option("includeHeaders", "true").load("/var/lib/kafka/data")
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from typing import Optional

_ZIP_CACHE: dict = {}


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
                    continue
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
    from kstore_cli.spark.source import KstoreDataSource

    if ship:
        spark.sparkContext.addPyFile(package_zip())
    spark.dataSource.register(KstoreDataSource)


__all__ = ["package_zip", "register"]
