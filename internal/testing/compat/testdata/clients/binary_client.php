<?php
// Drives a memcached server through PHP's memcached extension
// (libmemcached) in binary mode.
//
// Usage: php binary_client.php HOST:PORT PREFIX
// Prints one line per check and a closing "N passed, N failed" line; exits 1
// if any check failed.
[$host, $port] = explode(":", $argv[1]);
$p = $argv[2];
$m = new Memcached();
$m->setOption(Memcached::OPT_BINARY_PROTOCOL, true);
$m->setOption(Memcached::OPT_COMPRESSION, false);
$m->addServer($host, (int)$port);
$passed = 0;
$failed = 0;
function check($name, $got, $want) {
    global $passed, $failed;
    if ($got === $want) {
        $passed++;
        echo "ok $name\n";
    } else {
        $failed++;
        echo "FAIL $name got " . var_export($got, true) . " want " . var_export($want, true) . "\n";
    }
}
check("set", $m->set("{$p}a", "hello"), true);
check("get", $m->get("{$p}a"), "hello");
check("get miss", [$m->get("{$p}missing"), $m->getResultCode()], [false, Memcached::RES_NOTFOUND]);
// Over binary, libmemcached reports a refused add as "data exists" and a
// refused replace as "not found" (the status memcached sends).
check("add existing", [$m->add("{$p}a", "x"), $m->getResultCode()], [false, Memcached::RES_DATA_EXISTS]);
check("add new", $m->add("{$p}b", "bee"), true);
check("replace", $m->replace("{$p}b", "bee2"), true);
check("replace miss", [$m->replace("{$p}nob", "x"), $m->getResultCode()], [false, Memcached::RES_NOTFOUND]);
check("append", $m->append("{$p}a", " world"), true);
check("prepend", $m->prepend("{$p}a", ">"), true);
check("after append/prepend", $m->get("{$p}a"), ">hello world");
check("delete", $m->delete("{$p}b"), true);
check("delete miss", [$m->delete("{$p}b"), $m->getResultCode()], [false, Memcached::RES_NOTFOUND]);
check("set counter", $m->set("{$p}n", "10"), true);
check("increment", $m->increment("{$p}n", 5), 15);
check("decrement floors", $m->decrement("{$p}n", 20), 0);
check("increment creates", $m->increment("{$p}c", 1, 7, 0), 7);
check("increment after create", $m->increment("{$p}c", 1), 8);
check("getMulti", $m->getMulti(["{$p}a", "{$p}c", "{$p}zzz"]), ["{$p}a" => ">hello world", "{$p}c" => "8"]);
$r = $m->get("{$p}a", null, Memcached::GET_EXTENDED);
check("get extended", $r["value"], ">hello world");
check("cas ok", $m->cas($r["cas"], "{$p}a", "swapped"), true);
check("cas stale", [$m->cas($r["cas"], "{$p}a", "again"), $m->getResultCode()], [false, Memcached::RES_DATA_EXISTS]);
check("touch", $m->touch("{$p}a", 100), true);
check("int roundtrip", [$m->set("{$p}i", 42), $m->get("{$p}i")], [true, 42]);
check("array roundtrip", [$m->set("{$p}arr", ["x" => 1]), $m->get("{$p}arr")], [true, ["x" => 1]]);
check("setMulti", $m->setMulti(["{$p}m1" => "1", "{$p}m2" => "2"]), true);
check("deleteMulti", $m->deleteMulti(["{$p}m1", "{$p}m2"]), ["{$p}m1" => true, "{$p}m2" => true]);
check("set with ttl", $m->set("{$p}e", "soon", 1), true);
sleep(3);
check("expired", $m->get("{$p}e"), false);
$big = str_repeat("x", 512 * 1024);
$m->set("{$p}big", $big);
check("large value", $m->get("{$p}big") === $big, true);
$stats = $m->getStats();
check("stats", isset(array_values($stats)[0]["pid"]), true);
check("version", is_string(array_values($m->getVersion())[0]), true);
echo "$passed passed, $failed failed\n";
exit($failed ? 1 : 0);
