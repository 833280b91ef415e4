"""How a trib process ends on a signal: the handler runs even when the kernel picks another thread."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import REPO

pytestmark = pytest.mark.unit

# The main thread blocks SIGTERM, so the kernel must hand it to the one thread that accepts it, as
# it may hand it to a scrape's thread in `trib metrics --serve`. An untimed Event().wait() in the
# main thread is then never woken and the process ignores SIGTERM for good.
_CHILD = textwrap.dedent("""
    import signal, sys, threading, time
    from tributary_read.exits import raise_on_sigterm, until_signal, Terminated
    raise_on_sigterm()
    def other():
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM})
        print("ready", flush=True)
        while True:
            time.sleep(60)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    threading.Thread(target=other, daemon=True).start()
    try:
        until_signal()
    except Terminated:
        sys.exit(143)
""")


def test_sigterm_taken_by_another_thread_still_ends_the_main_threads_wait():
    p = subprocess.Popen([sys.executable, "-c", _CHILD], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout is not None and p.stdout.readline() == "ready\n"
        time.sleep(0.2)
        p.send_signal(signal.SIGTERM)
        assert p.wait(10) == 143
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
