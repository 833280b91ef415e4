"""`trib ingest` Kafka flags that are refused before anything connects (issue 20): one line, exit 2 or 3."""

from __future__ import annotations

import pytest
from conftest import invoke_trib
from helpers import LAYOUT, PARTITION, one_line_error

pytestmark = pytest.mark.unit


def _table(tmp_path):
    root = tmp_path / "t"
    invoke_trib("table", "create", str(root), "--layout", LAYOUT, "--partition", PARTITION, check=True)
    return root


def test_a_secret_on_the_command_line_is_refused(tmp_path):
    root = _table(tmp_path)
    for key in ("sasl.password", "ssl.key.password", "sasl.oauthbearer.client.secret"):
        p = invoke_trib("ingest", str(root), "--kafka", "127.0.0.1:1", "--topic", "t", "--app-id", "a",
                        "--time-field", "ts", "--kafka-option", f"{key}=hunter2")
        line = one_line_error(p, 3, f"--kafka-option {key} holds a secret", "trib.toml")
        assert "hunter2" not in line


def test_kafka_flags_on_a_file_run_and_settings_trib_needs_are_refused(tmp_path):
    root = _table(tmp_path)
    src = tmp_path / "s.jsonl"
    src.write_text('{"ts": 1764000000000}\n')
    p = invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts",
                    "--topic", "t", "--follow")
    assert p.returncode == 2 and "--topic apply to --kafka only" in p.stderr, p.stderr
    p = invoke_trib("ingest", str(root), "--source", str(src), "--app-id", "a", "--time-field", "ts", "--follow")
    assert p.returncode == 2 and "--follow and --commit-interval apply to --kafka and --source-dir" in p.stderr
    p = invoke_trib("ingest", str(root), "--kafka", "127.0.0.1:1", "--topic", "t", "--app-id", "a",
                    "--time-field", "ts", "--kafka-option", "enable.auto.commit=true")
    one_line_error(p, 3, "enable.auto.commit=true is refused", "offsets in the table")
    assert invoke_trib("log", str(root), "--json", check=True).stdout.count('"version"') == 0


def test_which_never_committed_partitions_count_as_added_after_the_apps_first_run():
    """A partition numbered past the topic's count at the app's first read (carried in every commit) was
    added later and starts at its earliest offset; one below it (another worker's) takes --start. An app
    committed before the count was kept: one more than the highest partition its offsets name."""
    from tributary_read.kafka.offsets import TopicPartition as TP, added_later, known_partitions, Positions
    from tributary_read.table.manifest import Transaction
    from tributary_read.table.state import AppState

    assert known_partitions(None) == {}
    counted = AppState(3, Transaction("a", {"kafka:ev/0": 9}, {"kafka_partitions": {"ev": 4}}))
    assert known_partitions(counted) == {"ev": 4}
    assert added_later(known_partitions(counted), [TP("ev", 1), TP("ev", 4), TP("ev", 7), TP("new", 9)]) == \
        [TP("ev", 4), TP("ev", 7)]  # a topic new to the app takes --start
    old = AppState(3, Transaction("a", {"kafka:ev/0": 9, "kafka:ev/2": 5, "kafka:x/0": 1}, {}),
                   high={"kafka:ev/0": 9, "kafka:ev/2": 5, "kafka:x/0": 1})
    assert known_partitions(old) == {"ev": 3, "x": 1}
    pos = Positions("a", {TP("ev", 4): 0}, touched={TP("ev", 4)}, known={"ev": 4})
    assert pos.transaction().meta["kafka_partitions"] == {"ev": 4}
