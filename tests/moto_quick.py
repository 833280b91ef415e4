"""moto's S3 server without the CPU it spends on what no client of the tests ever sees.

moto's server matches every request's host against each AWS service's URL patterns (hundreds of
regexes) to find the backend, and werkzeug logs every request: a third of its CPU, with eight
committers waiting on it. The answer per host never changes, so it is kept; the request log is off.

Beyond that, the suite's S3-protocol servers (tests/conftest.py's ``s3_server``, in the pytest worker; the Kafka
broker's, tests/kafka_broker.py) are moto's ThreadedMotoServer: their CPU is the suite's, on CI's two
cores. Measured per call on the suite's workloads (the 8-writer S3 contention test: ~10,000 requests,
~760 of them errors, listings of hundreds of keys), moto recomputes per request what never changes:

- every error reply (a 404 ``NoSuchKey``, a 412 of a lost commit race) makes a botocore ``Session``
  and lists the botocore data directory to map moto's package name to a service name, and rebuilds
  the service's table of error shapes (its cache lives in a factory made anew per call): ~1 ms;
- every timestamp it serialises (each key of a listing, a copy's ``LastModified``) is a string of its
  own ISO 8601 making, parsed back with dateutil's general parser: ~0.3 ms each;
- every request ID is 52 ``random.choice`` calls: ~70 us a request.

Each patch returns exactly what moto computes (the same service name, error shapes and datetimes);
request IDs stay 52 random letters and digits. What trib and Tansu see, conditional PUTs included, is
unchanged. Python 3.11's ``datetime.fromisoformat`` reads moto's strings; anything else it cannot read
goes to moto's own parser.
"""

from __future__ import annotations

import functools
import secrets
import string
from datetime import datetime

_ALPHABET = string.ascii_letters + string.digits


def quicken() -> None:
    """Apply the patches in this process (idempotent); before the server answers its first request."""
    import logging

    from moto.core import errors, responses, serialize, utils
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    if getattr(utils.service_name_from_moto_package_name, "quick", False):
        return
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    backend_for_host = DomainDispatcherApplication.get_backend_for_host
    found: dict = {}

    def get_backend_for_host(self, host):
        if host not in found:
            found[host] = backend_for_host(self, host)
        return found[host]

    DomainDispatcherApplication.get_backend_for_host = get_backend_for_host  # type: ignore[method-assign]

    # A pure function of the installed botocore data: computed once per package name.
    service_name = functools.cache(utils.service_name_from_moto_package_name)
    service_name.quick = True  # type: ignore[attr-defined]
    utils.service_name_from_moto_package_name = service_name

    # One cache of error tables for every factory (a service model's error shapes never change).
    shared: dict = {}

    def factory_init(self) -> None:
        self._error_lut_cache = shared

    errors.ErrorLookupFactory.__init__ = factory_init  # type: ignore[method-assign]

    parse = serialize.parse_to_aware_datetime

    def parse_to_aware_datetime(value):
        if isinstance(value, str):
            try:
                parsed = datetime.fromisoformat(value)
            except ValueError:
                return parse(value)
            if parsed.tzinfo is not None and not parsed.utcoffset():
                return parsed  # UTC, as moto writes them; an offset goes to moto's parser (it converts)
        return parse(value)

    serialize.parse_to_aware_datetime = parse_to_aware_datetime

    def gen_amzn_requestid_long(headerdict=None) -> str:
        req_id = _request_id()
        if isinstance(headerdict, dict):
            headerdict["x-amzn-requestid"] = req_id
        return req_id

    responses.gen_amzn_requestid_long = gen_amzn_requestid_long


def _request_id() -> str:
    """52 random letters and digits, as moto's own (from one draw of random bytes, not 52 calls)."""
    return "".join(_ALPHABET[b % len(_ALPHABET)] for b in secrets.token_bytes(52))
