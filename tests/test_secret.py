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
