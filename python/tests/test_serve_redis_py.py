"""`pmhash serve` driven by redis-py, the Python Redis client users already have."""

import os
import re
import subprocess
import time

import pytest
import redis


@pytest.fixture
def server(tmp_path):
    tool = os.environ.get("PMHASH_TOOL")
    if not tool:
        pytest.fail("PMHASH_TOOL is not set (make test-python sets it)")
    proc = subprocess.Popen([tool, "serve", str(tmp_path / "serve.pool"), "--create",
                             "--engine", "wophi", "--size", "64M", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()
    m = re.search(r"ready on 127\.0\.0\.1:(\d+)", line)
    assert m, line
    yield int(m.group(1)), proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def test_redis_py_commands(server):
    port, proc = server
    # redis-py 8 asks for RESP3 (HELLO 3) unless told protocol=2: the server speaks RESP2.
    r = redis.Redis(port=port, protocol=2)
    assert r.ping()
    assert r.set("k", b"\x00binary\xff")
    assert r.get("k") == b"\x00binary\xff"
    assert r.set("k", "x", nx=True) is None
    assert r.set("absent", "x", xx=True) is None
    assert r.mset({"a": "1", "b": "2"})
    assert r.mget("a", "nope", "b") == [b"1", None, b"2"]
    assert r.exists("a", "b", "nope") == 2
    assert r.delete("a", "nope") == 1
    assert r.dbsize() == 2
    assert sorted(r.scan_iter(count=1)) == [b"b", b"k"]
    with pytest.raises(redis.ResponseError):
        r.set("t", "v", ex=10)
    assert r.info("keyspace")["db0"]["keys"] == 2
    pipe = r.pipeline(transaction=False)
    for i in range(1000):
        pipe.set(f"p{i}", i)
    assert all(pipe.execute())
    assert r.get("p999") == b"999"
    try:
        r.shutdown(nosave=True)
    except redis.ConnectionError:
        pass  # the server closes the connection instead of replying, as Redis does
    assert proc.wait(timeout=30) == 0
