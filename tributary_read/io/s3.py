"""S3 and S3-protocol stores: data through pyarrow, commits through boto3.

The commit point is a ``PUT`` with ``If-None-Match: *``, which pyarrow cannot
send; boto3 (the ``s3`` extra) is imported only when a commit, a rename, a
delete or a directory marker's removal needs it.
"""

from __future__ import annotations

import threading
from typing import Mapping
from urllib.parse import ParseResult, urlparse

import pyarrow as pa
import pyarrow.fs as pafs

from tributary_read.errors import InvalidInputError, missing_extra
from tributary_read.io.arrow import ArrowStorage
from tributary_read.io.storage import Capabilities


#: A copy of a larger source goes in parts of this size (CopyObject takes at most 5 GiB in one request).
COPY_PART = 5 * 1024**3

#: How long a request may take and how often it is tried, unless the storage options say otherwise:
#: pyarrow's own defaults, stated here so that an upgrade cannot change them. Three tries ride out a
#: transient 5xx or a dropped connection; a refused request (403, a missing bucket) fails at its first
#: answer; a store that stops answering fails a request within a few tries of ``request_timeout``
#: (about 30 s), never hangs. The commit's boto3 client takes the same options where given.
RETRY_DEFAULTS = {"connect_timeout": 1.0, "request_timeout": 3.0, "max_attempts": 3}


def _retry_options(options: Mapping[str, str]) -> dict[str, float]:
    """``connect_timeout`` and ``request_timeout`` (seconds) and ``max_attempts``, checked: one line each."""
    out: dict[str, float] = {}
    for key, default in RETRY_DEFAULTS.items():
        raw = options.get(key)
        if raw is None or raw == "":
            out[key] = default
            continue
        try:
            value = int(raw) if key == "max_attempts" else float(raw)
        except (TypeError, ValueError):
            value = 0
        if not value > 0:
            what = "a whole number of tries, at least 1" if key == "max_attempts" else "a number of seconds above 0"
            raise InvalidInputError(f"storage option {key} must be {what}, not {raw!r}")
        out[key] = value
    return out

#: boto3 makes clients from a default session shared by the process, and not safely from two threads.
_CLIENT_LOCK = threading.Lock()


class S3Storage(ArrowStorage):
    """S3 and S3-protocol stores: commits are ``PUT`` with ``If-None-Match: *``."""

    #: Directories are key prefixes (no mtime); a PUT replaces an object whole;
    #: Spark and Hive reach S3 through Hadoop's ``s3a`` connector.
    capabilities = Capabilities(real_directories=False, remote=True, atomic_replace=True, hadoop_scheme="s3a")

    def __init__(self, bucket: str, key: str, options: Mapping[str, str]):
        self.bucket = bucket
        self.prefix = key.strip("/")
        self.options = dict(options)
        endpoint = self.options.get("endpoint_url")
        kw: dict = {
            "access_key": self.options.get("access_key_id"),
            "secret_key": self.options.get("secret_access_key"),
            "session_token": self.options.get("session_token"),
            "region": self.options.get("region") or "us-east-1",
        }
        if endpoint:
            u = urlparse(endpoint)
            kw["endpoint_override"] = u.netloc or u.path
            kw["scheme"] = u.scheme or "https"
        kw = {k: v for k, v in kw.items() if v is not None}
        self.retry = _retry_options(self.options)
        kw["connect_timeout"] = self.retry["connect_timeout"]
        kw["request_timeout"] = self.retry["request_timeout"]
        kw["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=int(self.retry["max_attempts"]))
        # A file is created when its first part is due, or at close: one PUT for a file under a part's
        # size (a staged commit file, a log document), where an eager open took three requests
        # (create, upload and complete a multipart upload). What an open would have reported (a missing
        # bucket, a denied write) comes from the write or the close instead, which the writers and
        # ArrowStorage.write wrap alike.
        kw["allow_delayed_open"] = True
        fs = pafs.S3FileSystem(**kw)
        root = f"{bucket}/{self.prefix}" if self.prefix else bucket
        super().__init__(fs, root, f"s3://{root}")
        self._client = None

    def client(self):
        """The boto3 client, made once: the renames after a commit and the deletes of a failed run
        reach for it from several threads, and boto3 makes clients from its one default session unsafely."""
        if self._client is not None:
            return self._client
        with _CLIENT_LOCK:
            if self._client is None:
                try:
                    import boto3
                    from botocore.config import Config
                except ImportError:
                    raise missing_extra("boto3", "s3") from None
                self._client = boto3.client(
                    "s3",
                    endpoint_url=self.options.get("endpoint_url"),
                    aws_access_key_id=self.options.get("access_key_id"),
                    aws_secret_access_key=self.options.get("secret_access_key"),
                    aws_session_token=self.options.get("session_token"),
                    region_name=self.options.get("region") or "us-east-1",
                    config=Config(**{"retries": {"max_attempts": 5, "mode": "standard"}, **self._boto_timeouts()}),
                )
            return self._client

    def _boto_timeouts(self) -> dict:
        """The timeouts and tries the user set, for boto3 too; boto3's own defaults otherwise (a commit
        whose reply is late is an unknown outcome, resolved by reading the log, so it waits longer)."""
        kw: dict = {}
        if self.options.get("connect_timeout"):
            kw["connect_timeout"] = self.retry["connect_timeout"]
        if self.options.get("request_timeout"):
            kw["read_timeout"] = self.retry["request_timeout"]
        if self.options.get("max_attempts"):
            kw["retries"] = {"max_attempts": int(self.retry["max_attempts"]), "mode": "standard"}
        return kw

    def _key(self, rel: str) -> str:
        return self.abspath(rel)[len(self.bucket) + 1 :]

    def makedirs(self, rel: str) -> None:
        """Nothing: S3 has no directories. A key is written under any prefix, and a listing finds it
        by its prefix, so a marker object (``dir/``) a level, which pyarrow's ``create_dir`` PUTs
        after a HEAD of the bucket, cost four requests a new file and served no reader."""

    def file_exists(self, rel: str) -> bool:
        """One HEAD of the key. pyarrow's file info follows a HEAD that finds nothing with a LIST (is it a
        "directory"?): two requests, one of them a LIST, for each version the log probes past its end,
        and contending committers probe at every lost race."""
        try:
            self.fs.open_input_file(self.abspath(rel)).close()  # a HEAD; the GET comes only with a read
        except FileNotFoundError:
            return False
        except (OSError, pa.ArrowException) as e:
            raise self._wrap("cannot stat", rel, e) from e
        return True

    def delete(self, rel: str) -> None:
        """One ``DeleteObject``, which succeeds where the key is absent (recovery re-runs deletes).

        pyarrow's ``delete_file`` first HEADs the key and afterwards PUTs a marker for the parent
        "directory", lest it vanish with its last file: three requests where S3 needs one, and
        directories on S3 are prefixes, which come and go with their files.
        """
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client().delete_object(Bucket=self.bucket, Key=self._key(rel))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "NoSuchBucket"):
                return  # nothing there to delete
            raise self._wrap("cannot delete", rel, e) from e
        except BotoCoreError as e:
            raise self._wrap("cannot delete", rel, e) from e

    def replace(self, rel: str, data: bytes) -> None:
        """One PUT: S3 replaces an object whole, so no temp object and no rename (a copy there).

        A concurrent :meth:`read` can still come back short: pyarrow sizes the
        object with a HEAD and then GETs that many bytes, so a read racing the
        PUT may get the first bytes of a longer new version. Replaced files are
        JSON documents, and one cut short never parses: the reader fails
        (ManifestCorruptError) and retries, it never reads a wrong value.
        """
        self.write(rel, data)

    def remove_empty_dir(self, rel: str) -> bool:
        """Delete the directory marker once nothing is under it.

        Only the marker object goes, never a prefix: a file a writer puts there
        concurrently survives.
        """
        if self.list(rel) or self.list_dirs(rel):
            return False
        self.client().delete_object(Bucket=self.bucket, Key=self._key(rel) + "/")
        return True

    def rename(self, src: str, dst: str) -> None:
        """A server-side copy, then the source's delete: the ``rename`` protocol's step after a commit.

        One CopyObject; where the store refuses it, boto3's managed copy, which
        copies a source larger than :data:`COPY_PART` in parts: one CopyObject
        refuses a source over 5 GiB, and a staged file a commit names must
        always reach its final name (a roll size of 0 puts no bound on a file).
        """
        from boto3.s3.transfer import TransferConfig
        from botocore.exceptions import BotoCoreError, ClientError

        source = {"Bucket": self.bucket, "Key": self._key(src)}
        try:
            try:
                # One CopyObject: what the managed copy sends too for a source under COPY_PART, after a
                # HEAD to learn its size. Only a refusal (a source over 5 GiB, an odd store) pays for it.
                self.client().copy_object(CopySource=source, Bucket=self.bucket, Key=self._key(dst))
            except ClientError as e:
                if e.response.get("Error", {}).get("Code", "") in ("NoSuchKey", "NoSuchBucket", "404"):
                    raise
                part = TransferConfig(multipart_threshold=COPY_PART, multipart_chunksize=COPY_PART)
                self.client().copy(source, self.bucket, self._key(dst), Config=part)
        except (ClientError, BotoCoreError) as e:  # a missing source too, as every store says it
            raise self._wrap("cannot rename", src, e) from e
        self.delete(src)

    def create_if_absent(self, rel: str, data: bytes) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        key = self._key(rel)
        try:
            self.client().put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*")
            return True
        except ClientError as e:
            code = e.response.get("Error", {}).get("Code", "")
            status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            # 412: the key exists. 409: a concurrent conditional PUT on the same
            # key is in flight; treat it as lost and let the caller re-read.
            if code in ("PreconditionFailed", "ConditionalRequestConflict") or status in (409, 412):
                return False
            raise self._wrap("cannot commit", rel, e) from e
        except BotoCoreError as e:
            raise self._wrap("cannot commit", rel, e) from e


def open_s3(u: ParseResult, options: Mapping[str, str]) -> S3Storage:
    """The registry's factory for ``s3://`` and ``s3a://`` URIs."""
    if not u.netloc:
        raise InvalidInputError(f"S3 URI needs a bucket: {u.geturl()}")
    return S3Storage(u.netloc, u.path, options)
