"""A class-data-sharing archive of the Spark driver's JVM: pipelines start seconds sooner.

Most of a pipeline's start-up is the driver's JVM loading and verifying Spark's classes. The
JVM can map them, ready to use, from an archive written by an earlier run that loaded them
(class data sharing, ``-XX:SharedArchiveFile``; JDK 13+). :func:`build_archive` writes one by
running small pipelines under ``spark-submit`` with ``-XX:ArchiveClassesAtExit`` (the JVM
writes the archive when it exits normally, which a JVM started by PySpark never does: PySpark
kills it). :func:`local_session <changestream.spark.local_session>` then starts its JVM with
it whenever one exists for this Spark and this Java.

The archive lives in the cache directory (``$CHANGESTREAM_CACHE_DIR``, else
``$XDG_CACHE_HOME/changestream``, else ``~/.cache/changestream``), named after the Spark
version, the Spark installation and the Java binary, so another of them never picks it up;
``changestream pipeline prepare`` then removes those no installation can map any more
(:func:`prune_archives`).
The JVM checks it again when it maps it and ignores one that does not fit (at most with a
warning in Spark's log): a stale or damaged archive costs the head start, never a run.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Final

from changestream.errors import ChangeStreamError, FailedPrecondition
from changestream.processes import is_running

#: How long building the archive may take before it is abandoned (it takes about 30 s).
BUILD_TIMEOUT_SECONDS: Final = 600.0
#: The JVM option that writes the archive on exit and the one that maps it.
_DUMP_OPTION: Final = "-XX:ArchiveClassesAtExit="
_USE_OPTION: Final = "-XX:SharedArchiveFile="


def cache_dir() -> Path:
    """Where changestream keeps what it derives from this machine's installation."""
    explicit = os.environ.get("CHANGESTREAM_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "changestream"


def spark_home() -> Path:
    """The Spark installation PySpark launches its JVM from."""
    from pyspark.find_spark_home import _find_spark_home

    return Path(_find_spark_home())


def java_binary() -> Path:
    """The ``java`` PySpark runs: ``$JAVA_HOME/bin/java``, else the first on ``PATH``."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    if not found or not Path(found).exists():
        raise FailedPrecondition("no Java found: install Java 17+ or set JAVA_HOME")
    return Path(found).resolve()


def archive_file() -> Path:
    """Where the archive of this Spark installation and this Java is (or would be)."""
    return _archive_of(spark_home().resolve(), java_binary())


def _archive_of(spark: Path, java: Path) -> Path:
    """Where the archive of the Spark installation ``spark`` (this PySpark's version) and the
    Java ``java`` (found) is."""
    import pyspark

    digest = _digest(spark, java)
    assert digest is not None, "java_binary() checked that Java is there"
    return cache_dir() / f"spark-{pyspark.__version__}-{digest}.jsa"


def _digest(spark: Path, java: Path) -> str | None:
    """What an archive's name says of the Spark installation and the Java it fits; None when
    either is gone."""
    try:
        stat = java.stat()
    except OSError:
        return None
    if not spark.is_dir():
        return None
    identity = f"{spark}|{java}|{stat.st_size}|{stat.st_mtime_ns}"
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _origin_file(archive: Path) -> Path:
    """Beside an archive, the Spark installation and the Java it was built for."""
    return archive.with_suffix(".origin.json")


#: An archive that does not say what it was built for is removed once nothing has read it
#: for this long: the installation of an earlier version that built it may still map it.
LEGACY_UNREAD_DAYS: Final = 7


def _read_lately(archive: Path) -> bool:
    """Whether the file was read (or written) in the last :data:`LEGACY_UNREAD_DAYS` days:
    a JVM mapping it reads it, which Linux's default ``relatime`` mounts record at most once
    a day (on ``noatime`` mounts only its writing counts)."""
    try:
        found = archive.stat()
    except FileNotFoundError:
        return True  # removed meanwhile: nothing to remove
    return time.time() - max(found.st_atime, found.st_mtime) < LEGACY_UNREAD_DAYS * 86_400


def prune_archives(keep: Path) -> dict[Path, str]:
    """Remove the cache directory's archives that no installation can map any more (their
    Spark installation or Java is gone or changed, or the installation that built ``keep``
    built them for another Spark version), those that do not say what they were built for
    (made by an earlier version) and that nothing read for :data:`LEGACY_UNREAD_DAYS` days,
    and the partial archives of builds that died; returns each archive removed with why.

    Each is about 70 MB, and every new installation path (a fresh clone, a new virtual
    environment) builds its own. A JVM that has one mapped keeps it after the removal."""
    here = str(spark_home().resolve())
    removed = {}
    for archive in keep.parent.glob("spark-*.jsa"):
        if archive == keep:
            continue
        origin = _origin_file(archive)
        try:
            built_for = json.loads(origin.read_text())
            spark, java = str(built_for["spark_home"]), Path(built_for["java"])
        except (OSError, ValueError, KeyError, TypeError):
            if _read_lately(archive):
                continue  # an installation of an earlier version may still map it
            why = (
                "it does not say what it was built for (an earlier version made it) and "
                f"was not read for {LEGACY_UNREAD_DAYS} days"
            )
        else:
            digest = _digest(Path(spark), java)
            if digest is None or not archive.stem.endswith(f"-{digest}"):
                why = f"the Spark installation {spark} or the Java {java} is gone or changed"
            elif spark == here:
                why = "this installation's archive for another Spark version"
            else:
                continue
        archive.unlink(missing_ok=True)
        origin.unlink(missing_ok=True)
        removed[archive] = why
    for partial in keep.parent.glob(".spark-*.jsa.*.partial"):
        pid = partial.suffixes[-2].lstrip(".")
        if pid.isdigit() and not is_running(int(pid)):
            partial.unlink(missing_ok=True)
    return removed


def driver_java_options() -> str | None:
    """The driver JVM's option that maps the archive, or None when there is none to map."""
    try:
        path = archive_file()
    except (ChangeStreamError, OSError):
        return None
    return f"{_USE_OPTION}{path}" if path.is_file() else None


def build_archive(job: str | os.PathLike[str], timeout: float = BUILD_TIMEOUT_SECONDS) -> Path:
    """Write the archive of this Spark and Java (replacing any) and return its path.

    ``job``, a Python script that runs small pipelines (``changestream pipeline prepare``
    passes its own), runs under ``spark-submit`` in a temporary directory (its path in
    ``$CHANGESTREAM_ARCHIVE_WORK``) so the JVM loads the classes pipelines use; the archive
    is written under a temporary name and renamed, so a concurrent run sees a whole archive
    or none; beside it goes what it was built for (see :func:`prune_archives`). Raises
    :class:`ChangeStreamError` with the end of the job's output when it fails or runs longer
    than ``timeout`` seconds."""
    spark, java = spark_home().resolve(), java_binary()
    target = _archive_of(spark, java)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ChangeStreamError(
            f"cannot create the cache directory {target.parent} ({exc.strerror}): set "
            "CHANGESTREAM_CACHE_DIR to a directory you can write"
        ) from exc
    partial = target.with_name(f".{target.name}.{os.getpid()}.partial")
    submit = spark / "bin" / "spark-submit"
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}
    env.pop("PYSPARK_SUBMIT_ARGS", None)
    command = [
        str(submit),
        "--master",
        "local[2]",
        "--conf",
        "spark.ui.enabled=false",
        "--driver-java-options",
        f"{_DUMP_OPTION}{partial}",
        str(job),
    ]
    with tempfile.TemporaryDirectory(prefix="changestream-archive-") as work:
        env["CHANGESTREAM_ARCHIVE_WORK"] = work
        log_path = Path(work) / "build.log"
        try:
            with open(log_path, "wb") as log:
                returncode = _run_bounded(command, work, env, log, timeout)
            if returncode != 0 or not partial.is_file():
                tail = log_path.read_text(errors="replace").splitlines()[-15:]
                raise ChangeStreamError(
                    f"building the JVM class archive failed (exit {returncode}); the end of "
                    "its output:\n" + "\n".join(tail)
                )
            partial.replace(target)
        finally:
            partial.unlink(missing_ok=True)
    _origin_file(target).write_text(json.dumps({"spark_home": str(spark), "java": str(java)}))
    return target


def _run_bounded(
    command: list[str], cwd: str, env: dict[str, str], log: IO[bytes], timeout: float
) -> int:
    """Run ``command`` in a session of its own; past ``timeout`` seconds the whole session
    (the JVM and the Python it started) is killed."""
    process = subprocess.Popen(
        command, cwd=cwd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired as exc:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
        raise ChangeStreamError(
            f"building the JVM class archive took over {timeout:g}s; abandoned"
        ) from exc
