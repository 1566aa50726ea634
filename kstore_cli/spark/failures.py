"""The cause of a failed Spark job on one line: the root Java exception's class and message.

A failed action reaches Python as a Py4J error whose first line says only which call failed
("An error occurred while calling o64.parquet."). The cause is at the end of the Java exception's
``getCause()`` chain; for a failure inside a Python task (the arrow writer) it is a
``PythonException`` whose message is the worker's traceback, and the cause is its last line. The
whole Java stack goes to the export's named Spark log, and ``--traceback`` prints it too (it is the
``__cause__`` of the error raised, see :class:`JavaStackTrace`). Imports no pyspark at module level.
"""

from __future__ import annotations

import glob
import os
import re
from typing import Any, Optional, Tuple

#: Filesystem classes Hadoop loads for a scheme, and the jar (Maven coordinates) that holds each.
FILESYSTEM_JARS = {
    "org.apache.hadoop.fs.s3a.S3AFileSystem": ("s3a", "org.apache.hadoop:hadoop-aws:{hadoop}"),
    "org.apache.hadoop.fs.azurebfs.SecureAzureBlobFileSystem": ("abfss", "org.apache.hadoop:hadoop-azure:{hadoop}"),
    "org.apache.hadoop.fs.azurebfs.AzureBlobFileSystem": ("abfs", "org.apache.hadoop:hadoop-azure:{hadoop}"),
    "com.google.cloud.hadoop.fs.gcs.GoogleHadoopFileSystem": (
        "gs", "com.google.cloud.bigdataoss:gcs-connector:hadoop3-<version>"),
}
_SCHEME_CLASS = {scheme: cls for cls, (scheme, _jar) in FILESYSTEM_JARS.items()}
_CLASS_NOT_FOUND = re.compile(r"Class (\S+) not found")
_NO_SCHEME = re.compile(r'No FileSystem for scheme "?([\w+.-]+)"?')
#: The last line of a Python traceback: "module.Class: message" (or a bare class name).
_PYTHON_ERROR = re.compile(r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Interrupt)\b.*)$")


#: What the line for a missing filesystem jar says (the export then exits 3: a library it needs is missing).
MISSING_JAR = "is not on the classpath"


class JavaStackTrace(Exception):
    """The Java stack of a failed Spark call, as the cause of the one-line error (``--traceback`` shows it)."""


def hadoop_version() -> str:
    """The Hadoop version of pyspark's own jars (hadoop-client-api-X.jar), '<hadoop version>' when unknown."""
    try:
        import pyspark

        jars = glob.glob(os.path.join(os.path.dirname(pyspark.__file__), "jars", "hadoop-client-api-*.jar"))
    except ImportError:
        jars = []
    match = re.search(r"hadoop-client-api-([\w.-]+)\.jar$", jars[0]) if jars else None
    return match.group(1) if match else "<hadoop version>"


def _java_exception(exc: BaseException) -> Any:
    """The Java Throwable behind a Py4JJavaError or a PySpark CapturedException (None without one)."""
    return getattr(exc, "java_exception", None) or getattr(exc, "_origin", None)


def root_cause(exc: BaseException) -> Optional[Tuple[str, str]]:
    """(class name, message) of the last Java exception in the getCause() chain, None when there is none
    (or the JVM cannot be asked any more)."""
    throwable = _java_exception(exc)
    if throwable is None:
        return None
    try:
        for _ in range(64):  # a cycle-proof bound: Throwable chains are short
            cause = throwable.getCause()
            if cause is None or cause.equals(throwable):
                break
            throwable = cause
        return str(throwable.getClass().getName()), str(throwable.getMessage() or "").strip()
    except Exception:  # noqa: BLE001 - a JVM gone away: no cause to give
        return None


def java_stack(exc: BaseException) -> Optional[str]:
    """The Java stack of `exc` (every cause), None without one."""
    stack = getattr(exc, "_stackTrace", None)  # CapturedException keeps it
    if stack:
        return str(stack)
    if _java_exception(exc) is None:
        return None
    try:
        text = str(exc)  # Py4JJavaError's text: the call, then the Java exception's printStackTrace
    except Exception:  # noqa: BLE001
        return None
    return text if "\tat " in text or "Caused by" in text else None


def describe(exc: BaseException) -> Optional[str]:
    """The one line for a failed Spark call: the root cause's class and message, with what to do where
    kstore knows it (a missing filesystem jar); None when `exc` carries no Java exception."""
    found = root_cause(exc)
    if found is None:
        return None
    cls, message = found
    if cls.endswith("PythonException"):
        lines = [line.strip() for line in message.splitlines() if _PYTHON_ERROR.match(line.strip())]
        return lines[-1] if lines else (message.splitlines() or [cls])[-1].strip()
    first = message.splitlines()[0] if message else ""
    return missing_jar_hint(first) or (f"{cls}: {first}" if first else cls)


def missing_jar_hint(message: str) -> Optional[str]:
    """'<class> not found: the <jar> jar ... --spark-conf spark.jars.packages=...' for Hadoop's
    ClassNotFoundException or UnsupportedFileSystemException of a cloud filesystem, else None."""
    match = _CLASS_NOT_FOUND.search(message)
    cls = match.group(1) if match else None
    if cls is None:
        scheme = _NO_SCHEME.search(message)
        cls = _SCHEME_CLASS.get(scheme.group(1)) if scheme else None
    if cls not in FILESYSTEM_JARS:
        return None
    scheme, package = FILESYSTEM_JARS[cls]
    package = package.format(hadoop=hadoop_version())
    jar = package.split(":")[1]
    return (f"{cls} not found: the {jar} jar (Hadoop's {scheme}:// filesystem) {MISSING_JAR}: "
            f"--spark-conf spark.jars.packages={package}")


def java_trace(exc: BaseException) -> Optional[JavaStackTrace]:
    """A :class:`JavaStackTrace` carrying `exc`'s Java stack and Python traceback (None without a stack)."""
    stack = java_stack(exc)
    if stack is None:
        return None
    return JavaStackTrace(stack).with_traceback(exc.__traceback__)
