"""Which setting names hold a secret: the one rule every front end applies.

A command line is the wrong place for a secret: argv is visible to every user
of the machine (``ps``), and lands in shell history and scheduler logs. So is
a URI, which trib prints in messages and reports. Kafka client settings, Spark
conf given as ``--conf`` or inside a ``spark?conf.…`` metastore URI all ask
this module, so a name refused by one is refused by all.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

#: Substrings of a setting's name that mark its value as a secret: passwords
#: (``sasl.password``, ``javax.jdo.option.ConnectionPassword``), keys and stores
#: (``fs.s3a.secret.key``, ``ssl.key.pem``, ``ssl.keystore.password``), tokens and
#: credentials (``fs.s3a.session.token``), and JAAS lines that embed a password.
_SECRET = re.compile(r"password|passwd|secret|credential|token|key\.pem|keystore|jaas", re.I)
#: Names that say *where* a secret is (a file, a store's path) or whether one may travel, not the secret
#: itself: ``password_file=`` is how a password stays off the command line.
_POINTER = re.compile(r"[._](?:file|location|path)$|^allow_plaintext_password$", re.I)


def is_secret(name: str) -> bool:
    """True if a setting called ``name`` holds a secret, so it must not come from argv or a URI."""
    return bool(_SECRET.search(name)) and not _POINTER.search(name)


#: What a report or a printed job shows in place of a secret's value.
REDACTED = "<redacted>"


def redacted(settings: Mapping[str, str]) -> dict[str, str]:
    """``settings`` with every secret's value replaced: job files may hold secrets (a file, not argv),
    but what trib prints or records of them (a job's JSON, a report) must not."""
    return {k: REDACTED if is_secret(k) else v for k, v in settings.items()}


def redacted_url(url: str) -> str:
    """A Spark Connect URL (``sc://HOST:PORT/;name=value;...``) as trib may print it: the value of every
    parameter whose name holds a secret (``token``) replaced. The URL may come from a job file or the
    environment, where a token belongs; a message, a report or a job's JSON goes to logs, where it does not."""
    head, *params = url.split(";")
    return ";".join([head, *(f"{p.split('=', 1)[0]}={REDACTED}" if is_secret(p.split("=", 1)[0]) else p
                             for p in params)])
