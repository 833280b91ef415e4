"""``trib doctor``: what a cluster's executors run, asked by one tiny task before a job fails on it.

A job on a cluster fails late, and inside a task, when the nodes' Python
lacks pyarrow or is another minor version than the driver's (PySpark refuses
that). The check runs the smallest Spark job on the session a job would get
(:func:`~tributary_read.spark.session.spark_session`, which ships trib's zip to
a cluster's executors) and reports, per executor process, its host, its
Python and the versions of pyarrow and trib it imports. trib comes from the
shipped zip there: the task function is this module's, so an executor that
ran it imported trib. The verdict is a MissingDependencyError (exit 10) naming
what is missing, or nothing.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass

from tributary_read.errors import MissingDependencyError


@dataclass(frozen=True)
class Node:
    """One Python worker's answer (or the driver's)."""

    host: str
    python: str
    version: str  # major.minor.micro
    pyarrow: str | None  # None: cannot import it
    trib: str | None
    trib_from: str | None  # where tributary_read was imported from (the shipped zip on a cluster)

    def to_json(self) -> dict:
        return asdict(self)


def here() -> Node:
    """This interpreter's answer: run on each executor by the probe, and on the driver."""
    import socket

    try:
        import pyarrow

        arrow: str | None = pyarrow.__version__
    except ImportError:
        arrow = None
    trib = sys.modules[__name__.split(".")[0]]  # this module's own package: the shipped zip on an executor
    v = sys.version_info
    return Node(socket.gethostname(), sys.executable, f"{v.major}.{v.minor}.{v.micro}", arrow,
                getattr(trib, "__version__", None), getattr(trib, "__file__", None))


def _answer(_rows):
    yield here()


def check(spark, tasks: int | None = None) -> dict:
    """Run the probe on ``spark``'s executors; the report, or MissingDependencyError for what would fail a job."""
    from tributary_read.spark.failure import as_tributary

    sc = spark.sparkContext
    n = tasks or max(2, sc.defaultParallelism)
    try:
        nodes = sorted(set(sc.parallelize(range(n), n).mapPartitions(_answer).collect()),
                       key=lambda x: (x.host, x.python))
    except Exception as e:  # noqa: BLE001 - py4j wraps the executor's failure in a Java one
        mapped = as_tributary(e, f"a test task on the executors of {sc.master}")
        if mapped is None:
            raise
        raise mapped from None
    driver = here()
    report = {"master": sc.master, "executors_python": str(sc.pythonExec), "driver": driver.to_json(),
              "executors": [x.to_json() for x in nodes]}
    minor = driver.version.rsplit(".", 1)[0]
    for x in nodes:
        if x.version.rsplit(".", 1)[0] != minor:  # PySpark refuses it before the probe runs; kept for clarity
            raise MissingDependencyError(f"the executors' Python on {x.host} ({x.python}) is {x.version}, the "
                                         f"driver's {driver.version}: PySpark needs the same minor version")
        if x.pyarrow is None:
            raise MissingDependencyError(
                f"the executors' Python on {x.host} ({x.python}) cannot import pyarrow: install it there, or "
                "point spark.pyspark.python (the job's [spark] conf) or $PYSPARK_PYTHON at a Python that has it")
    return report
