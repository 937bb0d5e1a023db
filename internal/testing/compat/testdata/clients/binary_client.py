"""Drives a memcached server through pylibmc (libmemcached) in binary mode.

Usage: python3 binary_client.py HOST:PORT PREFIX
Prints one line per check and a closing "N passed, N failed" line; exits 1
if any check failed.
"""
import sys
import time

import pylibmc

addr, prefix = sys.argv[1], sys.argv[2]
mc = pylibmc.Client([addr], binary=True, behaviors={"cas": True, "tcp_nodelay": True})
passed = failed = 0


def check(name, got, want):
    global passed, failed
    if got == want:
        passed += 1
        print("ok", name)
    else:
        failed += 1
        print("FAIL", name, "got", repr(got), "want", repr(want))


def outcome(fn, *args, **kw):
    """The call's result, or the name of the pylibmc error it raised."""
    try:
        return fn(*args, **kw)
    except pylibmc.Error as e:
        return type(e).__name__


k = lambda s: prefix + s
check("set", mc.set(k("a"), "hello"), True)
check("get", mc.get(k("a")), "hello")
check("get miss", mc.get(k("missing")), None)
check("add existing", outcome(mc.add, k("a"), "x"), False)
check("add new", mc.add(k("b"), "bee"), True)
check("replace", mc.replace(k("b"), "bee2"), True)
check("replace miss", outcome(mc.replace, k("nob"), "x"), "NotFound")
check("append", mc.append(k("a"), " world"), True)
check("prepend", mc.prepend(k("a"), ">"), True)
check("after append/prepend", mc.get(k("a")), ">hello world")
check("delete", mc.delete(k("b")), True)
check("delete miss", outcome(mc.delete, k("b")), False)
check("set counter", mc.set(k("n"), "10"), True)
check("incr", mc.incr(k("n"), 5), 15)
check("decr", mc.decr(k("n"), 20), 0)
check("incr miss", outcome(mc.incr, k("missing-counter"), 1), "NotFound")
check("incr non-numeric", outcome(mc.incr, k("a"), 1), "UnknownReadFailure")
check("get_multi", mc.get_multi([k("a"), k("n"), k("none")]), {k("a"): ">hello world", k("n"): "0 "})
check("set_multi", mc.set_multi({k("m1"): "1", k("m2"): "2"}), [])
check("get_multi after set_multi", mc.get_multi([k("m1"), k("m2")]), {k("m1"): "1", k("m2"): "2"})
val, cas = mc.gets(k("a"))
check("gets", val, ">hello world")
check("cas ok", mc.cas(k("a"), "swapped", cas), True)
check("cas stale", outcome(mc.cas, k("a"), "again", cas), False)
check("after cas", mc.get(k("a")), "swapped")
check("touch", mc.touch(k("a"), 100), True)
check("set with expiry", mc.set(k("e"), "soon", time=1), True)
time.sleep(2.1)
check("expired", mc.get(k("e")), None)
check("flags roundtrip int", (mc.set(k("i"), 42), mc.get(k("i"))), (True, 42))
big = "x" * (512 * 1024)
check("large value", (mc.set(k("big"), big), mc.get(k("big")) == big), (True, True))
stats = mc.get_stats()
check("stats", len(stats) == 1 and b"pid" in stats[0][1] or "pid" in stats[0][1], True)
check("delete_multi", mc.delete_multi([k("m1"), k("m2")]), True)
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
