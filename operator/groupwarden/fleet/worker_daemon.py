"""The audit's Python worker daemon (`spark.python.daemon.module`): PySpark's own daemon, started
with the imports already done and without Spark's zip archives on the import path.

PySpark forks every Python worker from one daemon per executor. Two costs come back with every
worker or task otherwise (py-spy of a 1M-record audit: about a quarter of the workers' CPU):
- The executor puts `pyspark.zip`, py4j's zip and spark-core's jar first on the workers'
  `PYTHONPATH`. `importlib.invalidate_caches()`, which PySpark's worker calls at the start of EVERY
  task (`worker_util.setup_spark_files`), makes each zip importer read its archive's whole
  directory again (the jar: ~5,000 entries, and it holds no Python at all), and modules in a zip
  have no bytecode cache, so each worker compiled every pyspark module it imported from source.
  The jar goes; the zips go when the same pyspark and py4j are installed in the interpreter's own
  site-packages (pip-installed PySpark, which `groupwarden audit` uses), and stay otherwise (a
  Spark distribution whose Python has no pyspark of its own).
- Each forked worker imported pyarrow, numpy and groupwarden's fleet modules itself (~0.3 CPU-s per
  worker). The daemon imports them once and freezes them out of the garbage collector's sight
  (PySpark's worker runs `gc.collect()` after every task); the workers inherit them at fork.
"""

from __future__ import annotations

import gc
import importlib
import sys
import zipfile
from importlib.machinery import PathFinder

# The packages whose zips the executor prepends; dropped only where each has another copy.
_ZIPPED = ("pyspark", "py4j")


def _has_python(jar: str) -> bool:
    try:
        with zipfile.ZipFile(jar) as archive:
            return any(name.endswith((".py", ".pyc")) for name in archive.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def without_spark_archives(path: list[str]) -> list[str]:
    """`path` without the archives Spark puts on the workers' `PYTHONPATH` that a worker needs no
    import from: jars without Python (spark-core's, ~5,000 entries) always; `pyspark.zip` and
    py4j's zip when both packages are found elsewhere on `path`."""
    drop = {entry for entry in path if entry.endswith(".jar") and not _has_python(entry)}
    zips = [entry for entry in path if entry.endswith(".zip") and ("pyspark" in entry or "py4j" in entry)]
    if zips:
        rest = [entry for entry in path if entry not in zips]
        if all(PathFinder.find_spec(name, rest) is not None for name in _ZIPPED):
            drop.update(zips)
    return [entry for entry in path if entry not in drop]


def preload() -> None:
    """What every audit task imports, imported once in the daemon (the workers inherit it)."""
    importlib.import_module("groupwarden.fleet.decide")
    importlib.import_module("groupwarden.fleet.pipeline")
    # `pq.read_table` imports pyarrow.dataset (and with it pandas) on its first call.
    importlib.import_module("pyarrow.dataset")
    gc.collect()
    gc.freeze()


def main() -> None:
    kept = without_spark_archives(sys.path)
    for entry in list(sys.path_importer_cache):
        # `importlib.invalidate_caches()` asks every cached finder, not only those on sys.path
        # (a zip importer is also cached under each directory inside its archive looked into).
        if any(entry == d or entry.startswith(d + "/") for d in set(sys.path) - set(kept)):
            sys.path_importer_cache.pop(entry, None)
    sys.path[:] = kept
    # pyspark.daemon reads its worker module from sys.argv when it is imported (as under `-m`).
    from pyspark import daemon

    preload()
    daemon.manager()  # type: ignore[no-untyped-call]  # pyspark has no annotations here


if __name__ == "__main__":
    main()
