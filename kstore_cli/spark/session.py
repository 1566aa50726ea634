"""The Spark session of an export: which Java runs it (17+), the settings (the export's defaults, then
--spark-conf), the JVM's logs kept off the terminal, a bare SparkContext where the arrow writer needs no more.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from functools import partial
from typing import Dict, Optional

from kstore_cli.errors import ExitStatus, KstoreError

#: Spark 4 runs on Java 17 and later.
JAVA_MIN_VERSION = 17
JAVA_MESSAGE = "spark-export needs Java 17+ (JAVA_HOME)"

#: Session settings the export needs (a --spark-conf of the same key wins).
DEFAULT_CONF = {
    "spark.sql.parquet.outputTimestampType": "TIMESTAMP_MICROS",
    "spark.sql.session.timeZone": "UTC",
    "spark.python.worker.reuse": "true",
    "spark.ui.enabled": "false",
    # start-up: no Hive catalog (in-memory), no event log, few shuffle partitions (an export never shuffles)
    "spark.sql.catalogImplementation": "in-memory",
    "spark.eventLog.enabled": "false",
    "spark.sql.shuffle.partitions": "4",
}



class JavaMissingError(KstoreError):
    """No Java 17+ to start Spark with (exit 3, like a missing codec library)."""

    exit_status = ExitStatus.UNREADABLE


_JAVA_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?')


def check_java() -> str:
    """The java Spark's launcher would run ($JAVA_HOME/bin/java, else java on PATH), if it is 17+;
    else JavaMissingError."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not java or not os.path.isfile(java) or not os.access(java, os.X_OK):
        raise JavaMissingError(f"{JAVA_MESSAGE}: " + (f"no {java}" if home else "no java on PATH and JAVA_HOME not set"))
    try:
        done = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} does not run ({exc})") from None
    match = _JAVA_VERSION.search(done.stderr + done.stdout)
    if done.returncode != 0 or not match:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} -version failed")
    major = int(match.group(1))
    if major == 1 and match.group(2):
        major = int(match.group(2))  # "1.8.0_392" is Java 8
    if major < JAVA_MIN_VERSION:
        raise JavaMissingError(f"{JAVA_MESSAGE}: {java} is Java {major}")
    return java


#: JVM options of an arrow-writer session. Its JVM only schedules tasks (the rows never enter it), yet
#: the C2 compiler kept compiling Spark's scheduler code for ~0.45 CPU-s per 8 M-row export, taking a
#: core from the Python workers. C1 alone compiles that code cheaply. Spark's own writer runs the rows
#: through the JVM and needs C2 (C1 alone made it 2.6x slower), so it keeps the JVM's defaults.
ARROW_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1"


def session_settings(master: str = "local[*]", conf: Optional[Dict[str, str]] = None, progress: bool = False,
                     writer: str = "spark") -> Dict[str, str]:
    """The Spark settings of an export's session: the export's defaults, then `conf` (which wins)."""
    settings = dict(DEFAULT_CONF)
    settings["spark.ui.showConsoleProgress"] = "true" if progress else "false"
    if master.startswith("local"):
        settings["spark.driver.host"] = "127.0.0.1"
        settings["spark.driver.bindAddress"] = "127.0.0.1"
    conf = dict(conf or {})
    if writer == "arrow":
        # Later JVM options win, so the user's own options (say, a TieredStopAtLevel) still decide.
        theirs = conf.pop("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"{ARROW_JAVA_OPTIONS} {theirs}".strip()
    settings.update(conf)
    return settings


#: Spark's log4j2 settings while its logs are off: only FATAL, on stderr (which is a log file then).
_QUIET_LOG4J2 = """\
rootLogger.level = fatal
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
"""
LOG_LEVEL_ENV = "KSTORE_SPARK_LOG_LEVEL"


class _JvmStderr:
    """While a JVM is started, fd 2 points at a log file, so the JVM's own stderr (its start-up
    warnings, Spark's log lines, local Python workers' stderr) goes there and not to the terminal."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.saved: Optional[int] = None

    def __enter__(self) -> "_JvmStderr":
        sys.stderr.flush()
        self.saved = os.dup(2)
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            os.dup2(fd, 2)
        finally:
            os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        sys.stderr.flush()
        os.dup2(self.saved, 2)
        os.close(self.saved)


def build_session(master: str = "local[*]", conf: Optional[Dict[str, str]] = None, progress: bool = False,
                  writer: str = "spark", log_dir: Optional[str] = None, context_only: bool = False):
    """A session for the export: this interpreter for the Python workers, the export's defaults.

    `writer` tunes the driver JVM for that writer (it takes effect when this call starts the JVM).
    Unless $KSTORE_SPARK_LOG_LEVEL asks for Spark's logs, a JVM this call starts logs only FATAL
    lines, and with `log_dir` its stderr goes to ``log_dir/spark.log`` (the JVM prints start-up
    warnings no setting turns off). With `context_only`, a bare SparkContext (what the arrow writer
    needs: a session's JVM side costs ~2 s more)."""
    import tempfile

    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    os.environ["PYSPARK_PYTHON"] = os.environ.get("PYSPARK_PYTHON") or sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = os.environ.get("PYSPARK_DRIVER_PYTHON") or sys.executable
    if master.startswith("local"):
        # Embedded mode needs no network beyond loopback (and no slow hostname lookups).
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    settings = session_settings(master, conf, progress, writer)
    quiet = not os.environ.get(LOG_LEVEL_ENV) and SparkContext._active_spark_context is None
    if quiet:
        # Our own log4j2 settings: Spark then also leaves out its "default log4j profile" lines.
        config = os.path.join(log_dir or tempfile.mkdtemp(prefix="kstore-spark-"), "log4j2.properties")
        with open(config, "w", encoding="utf-8") as f:
            f.write(_QUIET_LOG4J2)
        options = settings.get("spark.driver.extraJavaOptions", "")
        settings["spark.driver.extraJavaOptions"] = f"-Dlog4j2.configurationFile=file:{config} {options}".strip()
    builder = SparkSession.builder.master(master).appName("kstore spark-export")
    for key, value in settings.items():
        builder = builder.config(key, value)
    make = builder.getOrCreate
    if context_only:
        from pyspark import SparkConf

        spark_conf = SparkConf().setMaster(master).setAppName("kstore spark-export").setAll(list(settings.items()))
        make = partial(SparkContext.getOrCreate, spark_conf)
    if quiet and log_dir:
        with _JvmStderr(os.path.join(log_dir, "spark.log")):
            spark = make()
    else:
        spark = make()
    # Task failures are reported by kstore as one line with the cause; Spark's own ERROR logs
    # would print Java stack traces for the same failure. KSTORE_SPARK_LOG_LEVEL brings them back.
    getattr(spark, "sparkContext", spark).setLogLevel(os.environ.get(LOG_LEVEL_ENV, "FATAL"))
    return spark
