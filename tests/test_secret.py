"""A secret never comes from argv or a URI, and every front end refuses the same names.

``ps``, shell history and scheduler logs show a command line; trib prints URIs in
messages and reports. Which names hold a secret is decided by tributary_read.secret
alone (tests/test_architecture.py keeps it so); these runs check each front end asks it.
"""

from __future__ import annotations

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, one_line_error

from tributary_read.secret import is_secret

pytestmark = pytest.mark.unit

#: Real settings that hold secrets in Spark/Hadoop, Hive's metastore DB and Kafka clients.
SECRETS = ("spark.hadoop.fs.s3a.secret.key", "spark.hadoop.fs.s3a.session.token",
           "spark.hadoop.javax.jdo.option.ConnectionPassword", "spark.ssl.keyStorePassword",
           "sasl.password", "ssl.key.pem", "sasl.jaas.config")
#: Settings that merely sit near secrets: refusing them would block a normal job.
PLAIN = ("spark.hadoop.fs.s3a.endpoint", "spark.hadoop.fs.s3a.access.key.provider", "security.protocol",
         "sasl.mechanism", "spark.sql.shuffle.partitions", "ssl.ca.location", "ssl.keystore.location",
         "password_file", "allow_plaintext_password")


@pytest.mark.parametrize("name", SECRETS)
def test_secret_names(name):
    assert is_secret(name)


@pytest.mark.parametrize("name", PLAIN)
def test_plain_names(name):
    assert not is_secret(name)


@pytest.mark.parametrize("name", ["spark.hadoop.fs.s3a.secret.key", "spark.hadoop.javax.jdo.option.ConnectionPassword"])
def test_spark_conf_on_the_command_line_refuses_a_secret_before_spark_starts(tmp_path, name):
    script = tmp_path / "q.sql"
    script.write_text("SELECT 1;\n")
    for args in (["sql", "-f", str(script), "--conf", f"{name}=hunter2"], ["doctor", "--conf", f"{name}=hunter2"]):
        line = one_line_error(invoke_trib(*args), 3, f"--conf {name} holds a secret", "spark-defaults.conf")
        assert "hunter2" not in line


def test_the_same_name_is_refused_by_every_front_end(tmp_path):
    """A Kafka option, a Spark --conf and a spark?conf. metastore URI: one rule."""
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    script = tmp_path / "q.sql"
    script.write_text("SELECT 1;\n")
    name = "custom.vault.token"  # no front end lists it by name: the shared rule decides
    runs = (["ingest", str(root), "--kafka", "127.0.0.1:1", "--topic", "t", "--app-id", "a", "--time-field", "ts",
             "--kafka-option", f"{name}=hunter2"],
            ["sql", "-f", str(script), "--conf", f"{name}=hunter2"],
            ["sql", "-f", str(script), "--metastore", f"spark?conf.{name}=hunter2"])
    for args in runs:
        line = one_line_error(invoke_trib(*args), 3, name)
        assert "hunter2" not in line, args


def test_a_spark_connect_token_is_never_printed(tmp_path, monkeypatch):
    """A Spark Connect URL may carry a token (``sc://HOST:PORT/;token=...``): it belongs in the job file or
    the environment, and every line trib prints of the URL (a refusal, ``trib etl check``, a job's JSON,
    ``trib etl submit``) shows it redacted, from the one rule ``redacted_url``."""
    from etl_data import create_output_table, write_job

    from tributary_read.etl.job import Job

    monkeypatch.delenv("TRIB_SPARK_REMOTE", raising=False)
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    url = "sc://127.0.0.1:1/;user_id=ann;token=hunter2"
    (tmp_path / "raw").mkdir()
    create_output_table(tmp_path / "out")

    def job(name: str, spark: str) -> str:
        path = write_job(tmp_path / name, name=name, raw=tmp_path / "raw", out=tmp_path / "out")
        path.write_text(path.read_text().split("[spark]")[0] + spark)
        return str(path)

    ok = job("ok", f'[spark]\nremote = "{url}"\n')
    shown = "sc://127.0.0.1:1/;user_id=ann;token=<redacted>"
    r = invoke_trib("etl", "check", ok)
    assert r.returncode == 0 and shown in r.stdout and "hunter2" not in r.stdout + r.stderr, r.stdout + r.stderr
    r = invoke_trib("etl", "check", ok, "--json")
    assert r.returncode == 0 and '"remote": "' + shown in r.stdout and "hunter2" not in r.stdout, r.stdout
    assert Job.load(ok).to_json()["spark"]["remote"] == shown
    assert Job.load(ok).spark.remote == url  # the run itself still gets it
    refused = job("refused", f'[spark]\nremote = "{url}"\nconf = {{ "spark.driver.memory" = "1g" }}\n')
    assert "hunter2" not in one_line_error(invoke_trib("etl", "check", refused), 3, shown, "spark.driver.memory")
    assert "hunter2" not in one_line_error(invoke_trib("etl", "submit", ok, "--schedule-time", "2024-01-01T05:00:00Z"),
                                           3, shown)
    bad = job("bad", '[spark]\nremote = "grpc://127.0.0.1:1/;token=hunter2"\n')
    assert "hunter2" not in one_line_error(invoke_trib("etl", "check", bad), 3, "token=<redacted>")
    plain = job("plain", "")
    line = one_line_error(invoke_trib("etl", "check", plain, env={"TRIB_SPARK_REMOTE": "grpc://h:1/;token=hunter2"}),
                          3, "$TRIB_SPARK_REMOTE", "token=<redacted>")
    assert "hunter2" not in line
