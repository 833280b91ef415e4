"""Airflow provider: run trib's hourly job for its data interval, wait for complete partitions, and emit
partitioned asset events from trib's commits (docs/airflow.md).

Registered through the ``apache_airflow_provider`` entry point (``airflow providers list`` shows it);
install with the ``[airflow]`` extra. Importing this package does not import Airflow: the operator,
sensor and trigger load it on first use, so ``import tributary_read`` never does.
"""

from __future__ import annotations

from tributary_read.lazy import lazy_getattr

_LAZY = {
    "TribEtlOperator": "operators", "TribPartitionSensor": "sensors", "TribCompletionTrigger": "triggers",
    "table_asset": "assets", "table_uri": "assets",
}
__all__ = sorted([*_LAZY, "get_provider_info"])

__getattr__ = lazy_getattr(__name__, _LAZY)

_INTEGRATION = "Tributary Read"


def get_provider_info() -> dict:
    """What Airflow's providers manager reads (the ``apache_airflow_provider`` entry point)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        versions = [version("tributary-read")]
    except PackageNotFoundError:  # run from a source tree without an install
        versions = []
    return {
        "package-name": "tributary-read",
        "name": _INTEGRATION,
        "description": "Exact incremental loads on Hive/Spark: trib's hourly ETL for a data interval, sensors "
                       "for complete partitions, and partitioned asset events from trib's commits.",
        "versions": versions,
        "integrations": [{"integration-name": _INTEGRATION, "tags": ["software"]}],
        "operators": [{"integration-name": _INTEGRATION, "python-modules": ["tributary_read.airflow.operators"]}],
        "sensors": [{"integration-name": _INTEGRATION, "python-modules": ["tributary_read.airflow.sensors"]}],
        "triggers": [{"integration-name": _INTEGRATION, "python-modules": ["tributary_read.airflow.triggers"]}],
        "asset-uris": [{"schemes": ["trib"], "handler": None}],
    }
