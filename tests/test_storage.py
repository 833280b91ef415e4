"""Storage behaviour suite: every test in the first part runs on every backend.

``any_storage`` yields a Storage at a fresh local directory, a fresh prefix on
the local S3-protocol server and a fresh ``memory://`` root; the same
assertions must hold for all, because the manifest log relies only on this
interface.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
import uuid

import pytest

from tributary_read.errors import InvalidInputError, StorageError
from tributary_read.io.local import LocalStorage
from tributary_read.io.memory import MemoryStorage
from tributary_read.io.s3 import S3Storage
from tributary_read.io.storage import ENTRY_DIR, ENTRY_FILE, Capabilities, Storage, open_storage, safe_relpath

pytestmark = pytest.mark.unit

SLACK_MS = 5_000  # clock skew allowed for mtimes (S3 reports whole seconds)


@pytest.fixture
def store(any_storage):
    """Storage at a fresh root; S3 options come from the env set by ``s3_env``."""
    return any_storage


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- reads and writes ------------------------------------------------------------


def test_write_read_round_trip(store):
    payload = bytes(range(256)) * 17
    store.write("top.bin", payload)  # top level of a root that does not exist yet
    store.write("a/b/c.bin", b"nested")
    store.write("empty", b"")
    assert store.read("top.bin") == payload
    assert store.read("a/b/c.bin") == b"nested"
    assert store.read("empty") == b""
    store.write("a/b/c.bin", b"replaced")
    assert store.read("a/b/c.bin") == b"replaced"


def test_read_missing_raises_file_not_found(store):
    with pytest.raises(FileNotFoundError):
        store.read("missing.json")
    store.write("d/present", b"x")
    with pytest.raises(FileNotFoundError):
        store.read("d/missing")
    with pytest.raises(FileNotFoundError):
        store.read("no/such/dir/file")


def test_open_input_random_access(store):
    store.write("f.bin", b"0123456789")
    with store.open_input("f.bin") as f:
        assert f.size() == 10
        f.seek(4)
        assert f.read(3) == b"456"


def test_open_output_creates_parent_dirs(store):
    with store.open_output("x/y/z/out.bin") as f:
        f.write(b"abc")
        f.write(b"def")
    assert store.read("x/y/z/out.bin") == b"abcdef"
    assert store.info("x/y/z").is_dir
    store.sync("x/y/z/out.bin")  # durable before a commit names it; must not fail


def test_list_recursive_sizes_mtimes_and_relative_paths(store):
    before = _now_ms()
    store.write("a.txt", b"abc")
    store.write("d/b.bin", b"0123456789")
    store.write("d/e/c", b"")
    store.makedirs("empty/dir")  # directories are never listed as files
    after = _now_ms()

    files = sorted(store.list(), key=lambda f: f.path)
    assert [(f.path, f.size, f.is_dir) for f in files] == [
        ("a.txt", 3, False),
        ("d/b.bin", 10, False),
        ("d/e/c", 0, False),
    ]
    for f in files:
        assert before - SLACK_MS <= f.mtime_ms <= after + SLACK_MS, f

    # Paths stay relative to the root even when listing a subdirectory.
    assert sorted(f.path for f in store.list("d")) == ["d/b.bin", "d/e/c"]
    assert [f.path for f in store.list("d", recursive=False)] == ["d/b.bin"]
    assert [f.path for f in store.list("d/e")] == ["d/e/c"]


def test_list_missing_dir_is_empty(store):
    assert store.list() == []  # the root itself does not exist yet
    assert store.list("nope") == []
    store.write("a/x", b"1")
    assert store.list("nope/deeper") == []
    assert store.list_dirs("nope") == []


def test_list_dirs(store):
    store.write("a/x", b"1")
    store.write("b/c/y", b"2")
    store.write("top", b"3")
    dirs = sorted(store.list_dirs(), key=lambda f: f.path)
    assert [(d.path, d.is_dir) for d in dirs] == [("a", True), ("b", True)]
    assert [d.path for d in store.list_dirs("b")] == ["b/c"]
    assert store.list_dirs("b/c") == []


def test_info_and_exists(store):
    before = _now_ms()
    store.write("p/q.bin", b"12345")
    info = store.info("p/q.bin")
    assert info.path == "p/q.bin"
    assert info.size == 5
    assert not info.is_dir
    assert before - SLACK_MS <= info.mtime_ms <= _now_ms() + SLACK_MS
    assert store.info("p").is_dir
    assert store.info("p/missing") is None
    assert store.info("./p//q.bin").path == "p/q.bin"  # normalised
    assert store.exists("p/q.bin")
    assert store.exists("p")
    assert not store.exists("p/missing")
    assert not store.exists("missing/dir/file")


def test_file_exists_is_a_file_only(store):
    """The log's version probes and roll-forward ask this (one HEAD on S3): a file, not a directory, not absent."""
    store.write("p/q.bin", b"12345")
    assert store.file_exists("p/q.bin")
    assert not store.file_exists("p/missing")
    assert not store.file_exists("missing/dir/file")
    assert not store.file_exists("p")  # a directory (on S3: a prefix) is no file


def test_delete(store):
    store.write("d/gone", b"1")
    store.write("d/kept", b"2")
    store.delete("d/gone")
    assert not store.exists("d/gone")
    with pytest.raises(FileNotFoundError):
        store.read("d/gone")
    assert store.read("d/kept") == b"2"
    # Deleting what is not there is a no-op (recovery re-runs deletes).
    store.delete("d/gone")
    store.delete("never/existed")
    assert [f.path for f in store.list()] == ["d/kept"]


def test_rename(store):
    store.write("p/.staged-1", b"payload")
    store.rename("p/.staged-1", "p/part-1")
    assert not store.exists("p/.staged-1")
    assert store.read("p/part-1") == b"payload"
    assert [f.path for f in store.list()] == ["p/part-1"]
    store.makedirs("q")
    store.rename("p/part-1", "q/part-1")
    assert store.read("q/part-1") == b"payload"
    with pytest.raises(StorageError):
        store.rename("p/missing", "p/other")


def test_copy_gives_the_bytes_a_second_name_and_replaces_a_target(store):
    payload = bytes(range(256)) * 9000  # over one chunk of the streamed copy
    store.write("p/_SUCCESS", payload)
    store.write("q/.s/_SUCCESS", b"old")
    store.copy("p/_SUCCESS", "q/.s/_SUCCESS")
    assert store.read("q/.s/_SUCCESS") == payload and store.read("p/_SUCCESS") == payload
    store.copy("p/_SUCCESS", "r/deep/x")  # parents made as needed
    assert store.read("r/deep/x") == payload
    assert sorted(f.path for f in store.list("q")) == ["q/.s/_SUCCESS"]  # no temporary copy left behind
    if store.capabilities.hard_links:  # one file, two names
        assert os.path.samefile(store.abspath("p/_SUCCESS"), store.abspath("q/.s/_SUCCESS"))


def test_uri_for(store, any_storage_root):
    if isinstance(store, LocalStorage):
        assert store.uri == "file://" + os.path.abspath(any_storage_root)
    else:
        assert isinstance(store, (S3Storage, MemoryStorage))
        assert store.uri == any_storage_root
    assert store.uri_for("a/b.parquet") == store.uri + "/a/b.parquet"
    assert store.uri_for("a//./b.parquet") == store.uri + "/a/b.parquet"
    with pytest.raises(InvalidInputError):
        store.uri_for("../b.parquet")


def test_capabilities_and_hadoop_uri(store):
    caps = store.capabilities
    assert isinstance(store, Storage) and isinstance(caps, Capabilities)
    with pytest.raises(dataclasses.FrozenInstanceError):
        caps.remote = not caps.remote
    expected = {  # what each store promises; the readers branch on these, never on a scheme
        LocalStorage: Capabilities(True, False, True, "file", True, exchange_directories=True, hard_links=True),
        S3Storage: Capabilities(False, True, True, "s3a"),
        MemoryStorage: Capabilities(False, False, True, None),
    }[type(store)]
    assert caps == expected
    if isinstance(store, LocalStorage):
        assert store.hadoop_uri("a/b.parquet") == "file:" + store.root + "/a/b.parquet"
        assert store.hadoop_uri() == "file:" + store.root
    elif isinstance(store, S3Storage):
        assert store.hadoop_uri("a/b.parquet") == "s3a://" + store.root + "/a/b.parquet"
        assert store.hadoop_uri() == "s3a://" + store.root
    else:
        with pytest.raises(InvalidInputError, match="Spark and Hive cannot read it"):
            store.hadoop_uri("a/b.parquet")
    with pytest.raises(InvalidInputError):
        store.hadoop_uri("../b.parquet")


def test_root_info_and_stat_many(store):
    assert store.root_info() is None  # nothing written yet
    assert store.stat_many([]) == []
    store.write("d/x", b"12")
    assert store.root_info().is_dir and store.root_info().path == ""
    x, missing, d = store.stat_many(["d/x", "d/nope", "d"])
    assert (x.path, x.size, x.is_dir) == ("d/x", 2, False)
    assert missing is None
    assert (d.path, d.is_dir) == ("d", True)


def test_list_infos_entries_are_absolute_under_root(store):
    store.write("a/b/c.bin", b"123")
    store.write("top", b"")
    entries, unlisted = store.list_infos()
    assert unlisted == []
    assert all(e.path.startswith(store.root + "/") for e in entries)
    got = {(e.path[len(store.root) + 1:], e.type == ENTRY_FILE, e.type == ENTRY_DIR) for e in entries}
    assert got == {("a", False, True), ("a/b", False, True), ("a/b/c.bin", True, False), ("top", True, False)}
    files = [e for e in store.list_infos("a/b")[0] if e.type == ENTRY_FILE]
    assert [(e.base_name, e.size) for e in files] == [("c.bin", 3)]
    flat = {e.path[len(store.root) + 1:] for e in store.list_infos(recursive=False)[0]}
    assert flat == {"a", "top"}


def test_replace_swaps_whole_content(store):
    store.replace("_meta/table.json", b"v0")  # creates
    assert store.read("_meta/table.json") == b"v0"
    values = [f"v{i}".encode() * 100 for i in range(1, 8)]
    seen: list[bytes] = []
    stop = threading.Event()

    def reader() -> None:
        while not stop.is_set():
            seen.append(store.read("_meta/table.json"))  # never missing: every store here replaces atomically

    t = threading.Thread(target=reader)
    t.start()
    try:
        for v in values:
            store.replace("_meta/table.json", v)
    finally:
        stop.set()
        t.join(timeout=60)
    assert store.read("_meta/table.json") == values[-1]
    whole = {b"v0", *values}
    if isinstance(store, S3Storage):
        # pyarrow sizes an object with a HEAD, then GETs that many bytes: a read
        # racing a PUT can get the new version's first bytes (never a mix).
        # A JSON document cut short never parses, so readers fail loudly.
        torn = {s for s in seen if s not in whole}
        assert all(any(v.startswith(s) and len(s) < len(v) for v in values) for s in torn), torn
    else:
        assert set(seen) <= whole
    assert [f.path for f in store.list()] == ["_meta/table.json"]  # no temp file left


def test_remove_empty_dir_never_removes_content(store):
    store.write("a/b/f", b"1")
    store.makedirs("a/e")
    assert store.remove_empty_dir("a/b") is False
    assert store.read("a/b/f") == b"1"
    store.delete("a/b/f")
    assert store.remove_empty_dir("a/b") is True
    assert store.remove_empty_dir("a/e") is True
    assert store.list_dirs("a") == []
    assert store.remove_empty_dir("a") is True
    assert store.list_dirs() == [] and store.list() == []


# -- the commit primitive ----------------------------------------------------------


def test_create_if_absent_never_overwrites(store):
    assert store.create_if_absent("_log/00000.json", b"first") is True
    assert store.create_if_absent("_log/00000.json", b"second") is False
    assert store.create_if_absent("_log/00000.json", b"") is False
    assert store.read("_log/00000.json") == b"first"
    # No temp files are left next to the committed one.
    assert [f.path for f in store.list()] == ["_log/00000.json"]


def test_create_if_absent_does_not_replace_a_plain_write(store):
    store.write("_log/00001.json", b"written")
    assert store.create_if_absent("_log/00001.json", b"commit") is False
    assert store.read("_log/00001.json") == b"written"


def test_create_if_absent_races_have_exactly_one_winner(any_storage_root):
    threads, keys = 8, 20
    # One Storage per thread, as separate writer processes would have.
    stores = [open_storage(any_storage_root) for _ in range(threads)]
    payloads = [f"writer-{i}-{uuid.uuid4().hex}".encode() * 64 for i in range(threads)]
    wins: dict[str, list[int]] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()
    barrier = threading.Barrier(threads)

    def writer(i: int) -> None:
        try:
            barrier.wait()
            for k in range(keys):
                rel = f"_log/{k:05d}.json"
                if stores[i].create_if_absent(rel, payloads[i]):
                    with lock:
                        wins.setdefault(rel, []).append(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    ts = [threading.Thread(target=writer, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=60)
    assert not errors, errors
    assert sorted(wins) == [f"_log/{k:05d}.json" for k in range(keys)]
    for rel, winners in wins.items():
        assert len(winners) == 1, (rel, winners)
        assert stores[0].read(rel) == payloads[winners[0]], rel
    assert sorted(f.path for f in stores[0].list()) == sorted(wins)


# -- path safety -------------------------------------------------------------------

BAD_PATHS = [
    "",
    ".",
    "./",
    "..",
    "../x",
    "a/..",
    "a/../../x",
    "a/b/../../../x",
    "/abs",
    "//host/share",
    "\\x",
    "a\\..\\..\\x",
    "C:\\x",
    "s3://x",
    "file:///etc/passwd",
    "a/s3://x",
    "a\x00b",
]


@pytest.mark.parametrize("path", BAD_PATHS)
def test_safe_relpath_rejects_escapes(path):
    with pytest.raises(InvalidInputError):
        safe_relpath(path)


@pytest.mark.parametrize("path", [None, b"a", 3])
def test_safe_relpath_rejects_non_strings(path):
    with pytest.raises(InvalidInputError):
        safe_relpath(path)


@pytest.mark.parametrize(
    "path,expected",
    [
        ("a", "a"),
        ("a/b", "a/b"),
        ("./a//b/", "a/b"),
        ("a/./b", "a/b"),
        ("dt=2020062401/part-0.parquet", "dt=2020062401/part-0.parquet"),
        ("..a/b..", "..a/b.."),  # dots inside a name are not a parent reference
    ],
)
def test_safe_relpath_normalises(path, expected):
    assert safe_relpath(path) == expected


@pytest.mark.parametrize("path", ["../x", "a/../../x", "/abs", "s3://x", "a\x00b"])
def test_storage_operations_refuse_escaping_paths(store, path):
    for op in (
        lambda: store.read(path),
        lambda: store.write(path, b"x"),
        lambda: store.create_if_absent(path, b"x"),
        lambda: store.delete(path),
        lambda: store.info(path),
        lambda: store.rename("a", path),
        lambda: store.list(path),
    ):
        with pytest.raises(InvalidInputError):
            op()
    assert store.list() == []


def test_escaping_write_leaves_nothing_outside_local_root(tmp_path):
    store = open_storage(str(tmp_path / "table"))
    store.write("inside", b"1")
    for path in ("../outside", "a/../../outside"):
        with pytest.raises(InvalidInputError):
            store.write(path, b"x")
        with pytest.raises(InvalidInputError):
            store.create_if_absent(path, b"x")
    assert sorted(os.listdir(tmp_path)) == ["table"]


# -- local specifics -------------------------------------------------------------


def test_unwritable_local_root_is_a_storage_error(tmp_path):
    # A root under a regular file cannot be created even by root (ENOTDIR).
    blocker = tmp_path / "file.txt"
    blocker.write_bytes(b"not a directory")
    store = open_storage(str(blocker / "table"))
    for op in (
        lambda: store.write("a", b"x"),
        lambda: store.write("d/a", b"x"),
        lambda: store.create_if_absent("a", b"x"),
        lambda: store.create_if_absent("_log/00000.json", b"x"),
        lambda: store.makedirs("d"),
        lambda: store.open_output("d/e"),
        lambda: store.rename("a", "b"),
    ):
        with pytest.raises(StorageError) as ei:
            op()
        assert not isinstance(ei.value, OSError)
        assert store.uri in str(ei.value)
    assert blocker.read_bytes() == b"not a directory"


def test_read_only_local_root_is_a_storage_error(tmp_path):
    root = tmp_path / "table"
    root.mkdir()
    root.chmod(0o500)
    try:
        try:
            (root / "probe").write_bytes(b"")
        except PermissionError:
            pass
        else:
            pytest.skip("directory permissions are not enforced for this user (root)")
        store = open_storage(str(root))
        for op in (
            lambda: store.create_if_absent("_log/00000.json", b"x"),
            lambda: store.create_if_absent("top.json", b"x"),
            lambda: store.write("a", b"x"),
            lambda: store.makedirs("d"),
        ):
            with pytest.raises(StorageError):
                op()
        assert os.listdir(root) == []
    finally:
        root.chmod(0o700)


def test_a_backend_must_provide_every_abstract_operation():
    class Partial(Storage):
        capabilities = Capabilities(False, False, True, None)

        def read(self, rel):
            return b""

    with pytest.raises(TypeError, match="abstract"):
        Partial("r", "memory://r")
    with pytest.raises(TypeError):
        Storage("r", "memory://r")


def test_open_storage_schemes(tmp_path):
    plain = open_storage(str(tmp_path / "t"))
    via_uri = open_storage("file://" + str(tmp_path / "t"))
    assert isinstance(plain, LocalStorage) and isinstance(via_uri, LocalStorage)
    assert plain.root == via_uri.root == str(tmp_path / "t")
    plain.write("x", b"1")
    assert via_uri.read("x") == b"1"
    assert open_storage(str(tmp_path / "t"), {"fsync": "false"}).fsync is False
    for bad in ("", "ftp://host/t", "s3:///no-bucket"):
        with pytest.raises(InvalidInputError):
            open_storage(bad)


# -- S3 specifics ----------------------------------------------------------------


def test_s3_rename_copies_a_source_over_the_part_size_in_parts(s3_root, monkeypatch):
    """One CopyObject refuses a source over 5 GiB; a staged file of any size must reach its final name.

    The part size is lowered so a 12 MiB object takes the multipart copy path the server really serves.
    """
    from tributary_read.io import s3

    monkeypatch.setattr(s3, "COPY_PART", 5 * 1024**2)
    store = open_storage(s3_root)
    data = os.urandom(12 * 1024**2 + 17)
    store.write("p/.staged-big", data)
    store.rename("p/.staged-big", "p/part-big")
    assert not store.exists("p/.staged-big")
    assert store.read("p/part-big") == data


def test_s3_conditional_put_is_enforced_by_the_server(s3_server, s3_root):
    import boto3
    from botocore.exceptions import ClientError

    store = open_storage(s3_root)
    assert isinstance(store, S3Storage)
    client = boto3.client(
        "s3", endpoint_url=s3_server["endpoint_url"], aws_access_key_id="testing",
        aws_secret_access_key="testing", region_name="us-east-1",
    )
    key = f"{store.prefix}/_log/00000.json"
    client.put_object(Bucket="trib", Key=key, Body=b"from another writer")

    # The server itself refuses a conditional PUT on an existing key ...
    with pytest.raises(ClientError) as ei:
        client.put_object(Bucket="trib", Key=key, Body=b"x", IfNoneMatch="*")
    assert ei.value.response["ResponseMetadata"]["HTTPStatusCode"] == 412

    # ... so the commit primitive reports a lost race and leaves the object alone.
    assert store.create_if_absent("_log/00000.json", b"mine") is False
    assert client.get_object(Bucket="trib", Key=key)["Body"].read() == b"from another writer"
    assert store.read("_log/00000.json") == b"from another writer"
