"""The pmhash package against a pool file: the mapping protocol, errors, reopen, threads."""

import os
import threading

import pytest

import pmhash


@pytest.fixture
def pool_path(tmp_path):
    return str(tmp_path / "py.pool")


def test_mapping_protocol_and_reopen(pool_path):
    with pmhash.open(pool_path, engine="wophi", create=True, size="64M") as db:
        db[b"a"] = b"1"
        db["text"] = "värde"  # str: UTF-8
        db[bytearray(b"ba")] = memoryview(b"mv")
        assert db[b"a"] == b"1"
        assert db["text"] == "värde".encode()
        assert db[b"ba"] == b"mv"
        assert "a" in db and b"nope" not in db
        assert len(db) == 3
        del db["a"]
        assert len(db) == 2
        with pytest.raises(KeyError):
            db["a"]
        with pytest.raises(KeyError):
            del db["a"]
        assert db.get("a") is None and db.get("a", b"d") == b"d"
    assert db.closed
    with pmhash.open(pool_path) as db:  # the engine the pool holds
        assert dict(db.items()) == {b"text": "värde".encode(), b"ba": b"mv"}
        assert db.stats()["engine"] == "wophi"
        assert db.stats()["recovered"] is False


def test_insert_update_and_the_exceptions(pool_path):
    with pmhash.open(pool_path, engine="linear", create=True, size="16M") as db:
        db.insert("k", "v")
        with pytest.raises(pmhash.AlreadyExistsError):
            db.insert("k", "w")
        with pytest.raises(KeyError):
            db.update("other", "w")
        db.update("k", "w")
        assert db["k"] == b"w"
        with pytest.raises(ValueError):
            db.put(b"x" * (pmhash.MAX_KEY_SIZE + 1), b"v")
        with pytest.raises(TypeError):
            db.put(42, b"v")
        assert len(db) == 1
    with pytest.raises(ValueError):
        db["k"]  # closed
    with pytest.raises(ValueError):
        pmhash.open(pool_path, engine="group")  # the pool holds linear
    with pytest.raises(ValueError):
        pmhash.open(pool_path, persist="sometimes")


def test_damaged_pool_is_corruption_not_empty(pool_path):
    with pmhash.open(pool_path, engine="wophi", create=True, size="16M") as db:
        db["k"] = "v"
    with open(pool_path, "r+b") as f:
        f.seek(64)  # inside the header's checksummed fields
        byte = f.read(1)
        f.seek(64)
        f.write(bytes([byte[0] ^ 0xFF]))
    with pytest.raises(pmhash.CorruptionError):
        pmhash.open(pool_path)


def test_full_pool_is_full_error(pool_path):
    with pmhash.open(pool_path, engine="linear", create=True, size="4M", resize=False) as db:
        with pytest.raises(pmhash.FullError):
            for i in range(1_000_000):
                db[b"key%d" % i] = b"v" * 64
        assert len(db) > 0


def test_iteration_scan_and_get_many(pool_path):
    with pmhash.open(pool_path, engine="wophi", create=True, size="64M") as db:
        want = {b"k%d" % i: b"v%d" % i for i in range(5000)}
        for k, v in want.items():
            db[k] = v
        assert set(db) == set(want)
        assert sorted(db.values()) == sorted(want.values())
        cursor, seen = 0, []
        while True:
            cursor, page = db.scan(cursor, 100)
            seen += page
            if cursor == 0:
                break
        assert dict(seen) == want
        keys = [b"k1", b"absent", "k4999"]
        assert db.get_many(keys) == [b"v1", None, b"v4999"]


def test_threads_write_in_parallel(pool_path):
    with pmhash.open(pool_path, engine="wophi", create=True, size="64M") as db:
        def writer(t):
            for i in range(2000):
                db[b"t%d-%d" % (t, i)] = b"x"
        threads = [threading.Thread(target=writer, args=(t,)) for t in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(db) == 8000


def test_engines_lists_the_registry():
    names = [e["name"] for e in pmhash.engines()]
    assert {"wophi", "linear", "group", "spash", "cceh"} <= set(names)
    assert all(isinstance(e["crash_consistent"], bool) for e in pmhash.engines())


def test_dram_pool_and_engine_options():
    with pmhash.open("", engine="group", size="16M", group_size=64, tags=True) as db:
        db["k"] = "v"
        assert db["k"] == b"v"
        assert db.stats()["mapping"] == "dram"
    with pytest.raises(ValueError):
        pmhash.open("", engine="group", no_such_option=1)


def test_counters_are_off_unless_asked_for():
    with pmhash.open("", engine="wophi", size="16M") as db:
        db["k"] = "v"
        st = db.stats()
        assert st["counted"] is False and st["flushes"] == 0
    with pmhash.open("", engine="wophi", size="16M", counters=True) as db:
        db["k"] = "v"  # an insert persists its slot: at least one flush and one fence
        st = db.stats()
        assert st["counted"] is True and st["flushes"] >= 1 and st["fences"] >= 1
    with pytest.raises(TypeError):
        pmhash.open("", engine="wophi", size="16M", counters="no")  # truthy, yet not a bool


def test_bench_load_reads_results_and_refuses_other_files(tmp_path):
    from pmhash import bench
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    doc = bench.load(os.path.join(root, "bench", "results", "smartht-fpr.json"))
    negative = list(bench.rows(doc, engine="smartht", phase="negative"))
    assert len(negative) == 3 and all(r["false_positive_rate"] > 0 for r in negative)
    bad = tmp_path / "bad.json"
    bad.write_text('{"config": {}}')
    with pytest.raises(ValueError, match="no 'machine'"):
        bench.load(str(bad))
    bad.write_text("not json")
    with pytest.raises(ValueError, match="not JSON"):
        bench.load(str(bad))
