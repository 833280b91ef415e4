"""The ``spark-submit`` line that runs a job on a cluster (``trib etl submit``).

The application is :mod:`tributary_read.etl.driver` (a plain ``.py`` file, as
spark-submit wants), which loads the job and calls ``run_job`` on the session
spark-submit built. What must reach the cluster:

* trib's own code: without an archive, the zip of its package
  (:mod:`tributary_read.spark.ship`) with ``--py-files``, so the nodes need only
  pyspark and pyarrow (and pandas where the driver runs); or the
  Python environment with tributary-read installed, as an archive
  (``venv-pack``/``conda-pack``) unpacked as ``./environment`` in every
  container: ``--archives env.tar.gz#environment`` and
  ``spark.pyspark.python=./environment/bin/python``;
* in cluster mode, the job file and its SQL (``--files``): the driver runs in
  a container and finds them in its working directory. Table roots must then
  be cluster URIs (``hdfs://``, ``s3a://``…): a local path names the
  submitting machine's disk.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field

from tributary_read.errors import InvalidInputError
from tributary_read.etl.job import Job, is_uri
from tributary_read.secret import redacted_url
from tributary_read.spark.session import is_local, resolve_master, session_conf
from tributary_read.spark.ship import package_zip

ENV_DIR = "environment"


@dataclass(frozen=True)
class SubmitCommand:
    argv: tuple[str, ...]
    master: str
    deploy_mode: str
    schedule_time: str
    notes: tuple[str, ...] = field(default=(), hash=False)

    def shell(self) -> str:
        """The line, quoted for a POSIX shell."""
        return " ".join(shlex.quote(a) for a in self.argv)

    def to_json(self) -> dict:
        return {"argv": list(self.argv), "command": self.shell(), "master": self.master,
                "deploy_mode": self.deploy_mode, "schedule_time": self.schedule_time, "notes": list(self.notes)}


def driver_path() -> str:
    """The driver's file, handed to spark-submit as the application."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "driver.py")


def default_spark_submit() -> str:
    home = os.environ.get("SPARK_HOME")
    if home:
        return os.path.join(home, "bin", "spark-submit")
    return shutil.which("spark-submit") or "spark-submit"


def build_submit(job: Job, schedule_time, *, master: str | None = None, deploy_mode: str | None = None,
                 archives: str | None = None, spark_submit: str | None = None,
                 interval_start=None) -> SubmitCommand:
    """``interval_start``: a scheduler's data interval, checked here (:func:`~tributary_read.etl.run.check_interval`);
    the driver gets the aligned schedule time it names."""
    from tributary_read.etl.report import iso_z
    from tributary_read.etl.schedule import check_interval, schedule_time_ms

    job.needs("submit")
    if job.spark.remote:  # spark-submit starts a driver: the job's server would be silently ignored
        raise InvalidInputError(f"job {job.name} runs on the Spark Connect server {redacted_url(job.spark.remote)} "
                                "([spark] remote): run it with trib etl run, or drop remote to submit it")
    if interval_start is not None:
        check_interval(job, interval_start, schedule_time)
    aligned, _ = schedule_time_ms(schedule_time, job)
    when = iso_z(aligned)
    m = resolve_master(master or job.spark.master)
    mode = deploy_mode or job.spark.deploy_mode or "client"
    if mode == "cluster" and is_local(m):
        raise InvalidInputError(f"deploy mode cluster needs a cluster master (yarn, k8s://…, spark://…), not {m}")
    archive = archives or job.spark.archives
    conf = session_conf(m, job.spark.conf, hive=job.catalog is not None)
    notes: list[str] = []
    argv = [spark_submit or default_spark_submit(), "--master", m, "--deploy-mode", mode,
            "--name", f"trib-etl-{job.name}"]
    if archive:
        argv += ["--archives", f"{archive}#{ENV_DIR}"]
        python = f"./{ENV_DIR}/bin/python"
        conf.setdefault("spark.pyspark.python", python)
        if mode == "cluster":
            conf.setdefault("spark.pyspark.driver.python", python)
            if m == "yarn":
                conf.setdefault("spark.yarn.appMasterEnv.PYSPARK_PYTHON", python)
        else:
            conf.setdefault("spark.pyspark.driver.python", sys.executable)
    elif not is_local(m):
        # trib ships itself (the zip the session builder adds to cluster sessions, tributary_read.spark.ship).
        argv += ["--py-files", package_zip()]
        notes.append("no environment archive: trib ships its code with --py-files; the nodes' Python needs pyarrow"
                     + (" (and where the driver runs, pandas and the extras the job uses)" if mode == "cluster" else "")
                     + "; or pass --archives env.tar.gz, made with venv-pack or conda-pack")
        if mode == "client":
            conf.setdefault("spark.pyspark.driver.python", sys.executable)
    for k, v in sorted(conf.items()):
        argv += ["--conf", f"{k}={v}"]
    app_args = ["--schedule-time", when]
    if mode == "cluster":
        argv += ["--files", ",".join([job.path, job.sql_path])]
        job_arg = os.path.basename(job.path)
        app_args += ["--sql", os.path.basename(job.sql_path)]
        local = [i.table for i in job.inputs if not is_uri(i.root)]
        if not is_uri(job.output.root):
            local.append(job.output.table)
        if local:
            notes.append(f"cluster mode: {', '.join(local)} are local paths on this machine; use cluster URIs "
                         "(hdfs://…, s3a://…) in the job file")
    else:
        job_arg = job.path
    argv += [driver_path(), job_arg, *app_args]
    return SubmitCommand(tuple(argv), m, mode, when, tuple(notes))


def submit_env() -> dict[str, str]:
    """The environment spark-submit runs in: this one, with ``$SPARK_HOME`` the pyspark wheel's when unset.

    The wheel's ``bin/`` scripts find Spark through the ``python3`` on PATH, so without the venv on
    PATH they look for ``/bin/spark-class``; naming the wheel's home makes them work from any shell.
    """
    import importlib.util

    env = dict(os.environ)
    if not env.get("SPARK_HOME"):
        spec = importlib.util.find_spec("pyspark")
        if spec is not None and spec.submodule_search_locations:
            home = spec.submodule_search_locations[0]
            if os.path.isdir(os.path.join(home, "jars")):
                env["SPARK_HOME"] = home
    return env


@dataclass(frozen=True)
class SubmitResult:
    """What a captured run gave: its exit status, the JSON report (success) or one error line."""

    code: int
    report: str = ""
    error: str = ""


def run_submit(cmd: SubmitCommand, *, capture: bool = True) -> SubmitResult:
    """Run the line; its exit status (the driver exits with trib's codes).

    ``capture``: spark-submit's output is kept, not shown. It merges the driver's stderr (a
    traceback included) into its stdout, and logs on its stderr; on success the report is the
    driver's JSON alone, on failure one line: the driver's ``trib: error:`` line, else the last
    line spark-submit printed. Without ``capture`` everything goes to the terminal as it comes.
    """
    try:
        if not capture:
            return SubmitResult(subprocess.run(list(cmd.argv), check=False, env=submit_env()).returncode)
        proc = subprocess.run(list(cmd.argv), check=False, env=submit_env(), capture_output=True, text=True,
                              errors="replace")
    except FileNotFoundError:
        raise InvalidInputError(f"{cmd.argv[0]} not found: set $SPARK_HOME or pass the spark-submit to run") from None
    lines = proc.stdout.splitlines()
    if proc.returncode == 0:
        start = next((i for i, line in enumerate(lines) if line.startswith("{")), len(lines))
        return SubmitResult(0, report="\n".join(lines[start:]) + "\n" if start < len(lines) else "")
    errors = [line for line in lines if line.startswith("trib: error:")]
    if errors:
        return SubmitResult(proc.returncode, error=errors[-1][len("trib: error:"):].strip())
    last = [line.strip() for line in (proc.stderr.splitlines() + lines) if line.strip()]
    tail = last[-1] if last else "no output"
    return SubmitResult(proc.returncode, error=f"spark-submit exited {proc.returncode}: {tail}")
