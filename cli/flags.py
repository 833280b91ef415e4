"""The CLI's names for library parameters, so library errors name the flag to fix.

The library words its messages for every caller (``the schedule time``) and
marks each parameter it names (``TributaryError.params``);
``trib`` puts its own flags in their place when it prints the error. One map
for every command: a parameter is spelled the same wherever it is a flag.
"""

from __future__ import annotations

#: library parameter name -> the flag(s) that set it
FLAGS = {
    "start": "--start",
    "end": "--end",
    "bounds": "--start/--end",
    "schedule_time": "--schedule-time",
    "interval_start": "--interval-start",
    "period": "--period",
    "lag": "--lag",
    "form": "--window-form",
    "window": "--window",
    "mode": "--mode",
    "versions": "--since-version/--until-version",
    "layout": "--layout/--partition/--timezone",
    "partitions": "--partitions",
    "lookback": "--lookback",
    "min_age": "--min-age",
    "full_scan_every": "--full-scan-every",
    "state_dir": "--state-dir",
    "to_version": "--to-version",
    "commit_every": "--commit-every",
    "app_id": "--app-id",
    "time_field": "--time-field",
    "time_regex": "--time-regex",
    "arrival_time": "--arrival-time",
    "max_bad_fraction": "--max-bad-fraction",
    "on_bad_record": "--on-bad-record dead-letter",
    "final_after": "--final-after",
    "source_name": "--source-name",
    "older_than": "--older-than",
    "hive_table": "--hive-table",
    "metastore": "--metastore",
    "keytab": "--principal and --keytab",
    "delay": "--delay",
    "batch_size": "--batch-size",
    "max_drop_fraction": "--max-drop-fraction",
    "columns": "--columns",
    "var": "--var",
    "allow_untracked": "--allow-untracked",
    "allow_changed": "--allow-changed",
    "consumer": "--consumer",
    "full_scan": "--full-scan",
    "read_window": "--start/--end/--schedule-time",
    "since_version": "--since-version",
    "until_version": "--until-version",
    "parallel": "--parallel",
    "all_files": "--all",
    "initial_position": "--initial-position",
    "allow_beyond_horizon": "--allow-beyond-horizon",
    "max_files": "--max-files",
    "replay_partition": "--partition",
    "kafka": "--kafka",
    "kafka_option": "--kafka-option",
    "topic": "--topic",
    "kafka_columns": "--kafka-columns",
    "worker": "--worker",
    "on_gap": "--on-gap skip",
    "time_source": "--time-source kafka",
    "commit_interval": "--commit-interval",
    "close_inactive": "--close-inactive",
    "allow_lost": "--allow-lost",
    "restate_interval": "--restate",
    "drop_removed_input": "--drop-removed-input",
    "partition_by": "--partition-by/--iceberg-partition-by",
}


def message(error: BaseException) -> str:
    """``error``'s message, with the CLI's flags where it names library parameters."""
    reword = getattr(error, "reword", None)
    return reword(FLAGS) if reword is not None else str(error)
