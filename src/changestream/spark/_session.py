"""A local SparkSession set up for changestream jobs."""

from __future__ import annotations

import importlib
import logging
import os
import sys
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

import pyspark
from pyspark import SparkConf, SparkContext
from pyspark.sql import SparkSession

from changestream.spark.huge_pages import disable_transparent_huge_pages
from changestream.spark.jvm_archive import driver_java_options
from changestream.spark.scratch import scratch_dir
from changestream.spark.zygote import start_zygote

log = logging.getLogger(__name__)


#: The driver JVM's options. C1 only (no C2): in changestream's jobs the JVM schedules tasks
#: and moves small Arrow batches while Python does the work, and C2's compiler threads cost
#: seconds of CPU in the first minute, which small machines feel (on 2 cores: a 300,000-change
#: catch-up 1.5 s sooner, live micro-batches about 60 ms shorter).
DRIVER_JAVA_OPTIONS: Final = ("-XX:TieredStopAtLevel=1",)


def local_session(
    master: str = "local[2]",
    app_name: str = "changestream",
    log: str | os.PathLike[str] | None = None,
    warm: bool = False,
    source: bool = True,
) -> SparkSession:
    """A SparkSession on ``master`` whose Python workers run this interpreter (so they see
    the same packages), with the ``changestream`` source registered (unless not ``source``:
    registering a Python data source costs a Python process of Spark's, about a second on
    two cores). With ``log``, the JVM's own output (its WARN lines, progress bars) goes to
    that file, not to this terminal. With ``warm``, :func:`warm_workers` starts as soon as
    the session is up.

    A new driver JVM gets :data:`DRIVER_JAVA_OPTIONS` and maps the class archive of
    :mod:`changestream.spark.jvm_archive` when there is one (``changestream pipeline
    prepare`` builds it), unless ``PYSPARK_SUBMIT_ARGS`` passes driver Java options of its
    own (those win). The session runs on :func:`local_context`."""
    from changestream.spark._source import register

    local_context(master, app_name, log, warm)
    spark = SparkSession.builder.getOrCreate()
    if source:
        register(spark)
    return spark


def local_context(
    master: str = "local[2]",
    app_name: str = "changestream",
    log: str | os.PathLike[str] | None = None,
    warm: bool = False,
) -> SparkContext:
    """The SparkContext of :func:`local_session`, set up the same way, without a SQL session:
    what the pipeline runs on (its jobs are plain RDD tasks, and a SparkSession costs about
    0.6 s more to start on two cores).

    It turns transparent huge pages off for this process and those it starts (see
    :mod:`changestream.spark.huge_pages`; setting ``MIMALLOC_ALLOW_THP`` leaves them as
    they are). On a local master, when this process has no JVM yet, a zygote does the Python
    daemon's imports while the JVM starts (see :mod:`changestream.spark.zygote`), unless
    ``PYSPARK_SUBMIT_ARGS`` or ``spark-defaults.conf`` sets ``spark.task.cpus`` or
    ``spark.executorEnv.OMP_NUM_THREADS`` (the zygote imports numpy with the workers'
    ``OMP_NUM_THREADS``, Spark's default of 1 otherwise)."""
    # Workers must import changestream and pyarrow from this environment.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    disable_transparent_huge_pages()
    conf = context_conf(master, app_name)
    if master.startswith("local") and SparkContext._gateway is None and not _workers_threads_set():
        # The JVM about to start finds its Python daemon's imports done (see ``zygote``). A
        # JVM already running keeps the environment it started with, and PySpark starts a
        # new context on it: no zygote would be found.
        start_zygote(Path(_socket_dir()), {"OMP_NUM_THREADS": _SPARK_TASK_CPUS})
    _import_while_the_jvm_starts()
    if log is None:
        context = SparkContext.getOrCreate(conf)
    else:
        with _stderr_to(Path(log)):
            context = SparkContext.getOrCreate(conf)
        context.setLogLevel("ERROR")
    if warm:
        warm_workers(context)
    return context


def _import_while_the_jvm_starts() -> None:
    """Import, in the background, what PySpark imports at its first call into a new JVM:
    its py4j converter of numpy arrays imports ``pyspark.testing.utils`` (pandas with it),
    0.3-0.5 s of Python after the JVM is up. Imported while PySpark waits for the JVM to
    start, a context took 1.7-1.9 s to start where it took 2.1-2.3 (three alternations)."""

    def run() -> None:
        try:
            importlib.import_module("pyspark.testing.utils")
        except Exception as exc:  # the first call imports it again and meets the error
            log.debug("importing pyspark.testing.utils failed: %s", exc)

    threading.Thread(target=run, name="changestream-early-imports", daemon=True).start()


def context_conf(master: str, app_name: str) -> SparkConf:
    """The configuration :func:`local_context` starts a context with."""
    conf = (
        SparkConf()
        .setMaster(master)
        .setAppName(app_name)
        .set("spark.ui.enabled", "false")
        .set("spark.sql.shuffle.partitions", "2")
        .set("spark.sql.session.timeZone", "UTC")
        .set("spark.pyspark.python", sys.executable)
        # Its Python daemon imports pyspark with bytecode (see changestream.spark._daemon).
        .set("spark.python.daemon.module", "changestream.spark._daemon")
        # Checkpoint files renamed with FileSystem.rename: Hadoop's FileContext rename forks
        # a `readlink` per file on a local disk, about 25 ms of every micro-batch's commits.
        .set(
            "spark.sql.streaming.checkpointFileManagerClass",
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager",
        )
    )
    sockets = _socket_dir() if master.startswith("local") else None
    if sockets is not None and len(sockets) <= _LONGEST_SOCKET_DIR:
        # Workers on this machine talk to the JVM over Unix domain sockets: over TCP, a
        # task's input reached its worker about 40 ms after its command, a delayed ACK's
        # wait (a 2-task job took 100-150 ms, 51-84 with these). Not for a cluster: its
        # executors would need this driver's directory.
        conf.set("spark.python.unix.domain.socket.enabled", "true")
        conf.set("spark.python.unix.domain.socket.dir", sockets)
    # Spark's local directories and the JVM's temporary files in this process's scratch
    # directory, which the next driver removes if this one is killed (see ``scratch``).
    if not _user_sets("spark.local.dir") and "SPARK_LOCAL_DIRS" not in os.environ:
        conf.set("spark.local.dir", str(_scratch("local")))
    if not _driver_java_options_given():
        options = [*DRIVER_JAVA_OPTIONS, driver_java_options(), _jvm_temp_option()]
        conf.set("spark.driver.extraJavaOptions", " ".join(o for o in options if o))
    return conf


def _scratch(name: str) -> Path:
    path = scratch_dir() / name
    path.mkdir(exist_ok=True)
    return path


def _jvm_temp_option() -> str | None:
    """The driver JVM's temporary directory in the scratch directory, unless its path would
    need quoting among the options."""
    path = str(_scratch("jvm"))
    return None if any(c.isspace() or c in "'\"\\" for c in path) else f"-Djava.io.tmpdir={path}"


def _user_sets(*keys: str) -> bool:
    """Whether the user sets any of the Spark properties ``keys`` through
    ``PYSPARK_SUBMIT_ARGS`` or the ``spark-defaults.conf`` that ``spark-submit`` reads (theirs
    wins: ours is left out)."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    if any(key in args for key in keys):
        return True
    home = os.environ.get("SPARK_HOME") or str(Path(pyspark.__file__).parent)
    folder = os.environ.get("SPARK_CONF_DIR") or os.path.join(home, "conf")
    try:
        lines = Path(folder, "spark-defaults.conf").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[:1] == [key] for line in lines for key in keys)


#: Spark's default ``spark.task.cpus``, which it gives its Python workers as
#: ``OMP_NUM_THREADS`` unless ``spark.executorEnv.OMP_NUM_THREADS`` says otherwise.
_SPARK_TASK_CPUS: Final = "1"


def _workers_threads_set() -> bool:
    """Whether the user chooses the Python workers' ``OMP_NUM_THREADS`` (through
    ``spark.task.cpus`` or ``spark.executorEnv.OMP_NUM_THREADS``) where only the JVM reads
    it: the zygote, started before the JVM, could not import as the workers would."""
    return _user_sets("spark.task.cpus", "spark.executorEnv.OMP_NUM_THREADS")


#: A socket's path must fit in 107 bytes; Spark names each ``.<uuid>.sock`` in the directory.
_LONGEST_SOCKET_DIR: Final = 64


def _socket_dir() -> str:
    """The directory of the sessions' socket files, in this process's scratch directory
    (Spark leaves its sockets behind: PySpark kills the JVM and the workers)."""
    return str(_scratch("sockets"))


def _driver_java_options_given() -> bool:
    """Whether the user passes the driver JVM options, through ``PYSPARK_SUBMIT_ARGS`` or a
    ``spark-defaults.conf`` (theirs win: ours are left out rather than theirs replaced)."""
    args = os.environ.get("PYSPARK_SUBMIT_ARGS", "")
    return "--driver-java-options" in args or _user_sets("spark.driver.extraJavaOptions")


@contextmanager
def _stderr_to(log: Path) -> Iterator[None]:
    """Point file descriptor 2 at ``log`` for the block: the JVM started in it inherits that,
    and keeps writing there after this process's own stderr is put back."""
    log.parent.mkdir(parents=True, exist_ok=True)
    saved = os.dup(2)
    target = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.dup2(target, 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(target)


def warm_workers(context: SparkContext) -> threading.Thread:
    """Start, in the background, what a pipeline's first micro-batch would otherwise wait for:
    Spark's Python workers, with the pipeline's task code imported and what pyarrow loads at
    its first conversion loaded too (a tiny job). The workers stay for the micro-batches
    (Spark reuses them). A failure here only costs the head start: the micro-batch meets it
    again and reports it."""

    def run() -> None:
        try:
            slots = context.defaultParallelism
            context.parallelize(range(slots), slots).mapPartitions(_import_task_code).collect()
        except Exception as exc:
            log.debug("warming Spark's Python workers failed: %s", exc)

    thread = threading.Thread(target=run, name="changestream-warm-workers", daemon=True)
    thread.start()
    return thread


def _import_task_code(items: Iterable[int]) -> Iterator[int]:
    import pyarrow as pa

    import changestream.spark._tasks  # noqa: F401

    # pyarrow's first conversion of Python values imports pandas (when installed): without
    # this, a fresh worker's first CDC task of 7,217 changes took 473 ms, and 188 ms with it.
    pa.array([0])
    yield sum(1 for _ in items)
