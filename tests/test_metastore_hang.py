"""A metastore that hangs in the middle of a session (issue 25, item 8, beyond the handshake).

tests/test_metastore_timeout.py hangs the server from its first byte. Here a relay to the
session's real metastore and HiveServer2 passes the connect, the handshake and a call, then
swallows every reply: the next call still ends within ``?timeout=``, as MetastoreError (exit 8).
"""

from __future__ import annotations

import time

import pytest

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("scheme", ["thrift", "hs2"])
def test_a_metastore_that_hangs_mid_session_fails_the_next_call_within_the_timeout(hive_services, scheme):
    """Not only the connect and the handshake: after calls that went through, a call whose reply never
    comes fails with MetastoreError (exit 8) within ``?timeout=``."""
    from faultproxy import StallingRelay

    from tributary_read.errors import MetastoreError
    from tributary_read.hive.metastore import open_metastore
    from tributary_read.hive.model import TableName

    port = hive_services.hms_port if scheme == "thrift" else hive_services.hs2_port
    with StallingRelay(port) as relay:
        user = "user=trib&" if scheme == "hs2" else ""
        with open_metastore(f"{scheme}://127.0.0.1:{relay.port}?{user}timeout=3s") as ms:
            name = TableName("default", "no_such_table_for_the_timeout_test")
            with pytest.raises(MetastoreError):  # an answer: the table does not exist
                ms.table_info(name)
            relay.stall()
            t0 = time.monotonic()
            with pytest.raises(MetastoreError, match="did not answer within 3s") as e:
                ms.table_info(name)
            assert time.monotonic() - t0 < 15, "the call was not bounded by ?timeout="
            assert e.value.exit_code == 8
