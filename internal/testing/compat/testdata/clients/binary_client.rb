# Drives a memcached server through Dalli 3 (binary protocol only).
#
# Usage: ruby binary_client.rb HOST:PORT PREFIX
# Prints one line per check and a closing "N passed, N failed" line; exits 1
# if any check failed.
require "dalli"

addr, prefix = ARGV
dc = Dalli::Client.new(addr, socket_timeout: 5, serializer: Marshal)
$passed = 0
$failed = 0

def check(name, got, want)
  if got == want
    $passed += 1
    puts "ok #{name}"
  else
    $failed += 1
    puts "FAIL #{name} got #{got.inspect} want #{want.inspect}"
  end
end

k = ->(s) { prefix + s }
check("set", dc.set(k["a"], "hello", nil, raw: true).is_a?(Integer), true)
check("get", dc.get(k["a"]), "hello")
check("get miss", dc.get(k["missing"]), nil)
check("add existing", dc.add(k["a"], "x", nil, raw: true), false)
check("add new", dc.add(k["b"], "bee", nil, raw: true).is_a?(Integer), true)
check("replace", dc.replace(k["b"], "bee2", nil, raw: true).is_a?(Integer), true)
# Dalli 3.0 answers a replace of a missing key with 0 and a delete of one
# with nil, against memcached as against kvd.
check("replace miss", dc.replace(k["nob"], "x", nil, raw: true), 0)
check("append", dc.append(k["a"], " world"), true)
check("prepend", dc.prepend(k["a"], ">"), true)
check("after append/prepend", dc.get(k["a"]), ">hello world")
check("delete", dc.delete(k["b"]), true)
check("delete miss", dc.delete(k["b"]), nil)
check("incr creates", dc.incr(k["n"], 1, nil, 10), 10)
check("incr", dc.incr(k["n"], 5), 15)
check("decr floors", dc.decr(k["n"], 20), 0)
check("incr miss no create", dc.incr(k["none"], 1), nil)
check("object roundtrip", [dc.set(k["obj"], { "x" => [1, 2] }).is_a?(Integer), dc.get(k["obj"])], [true, { "x" => [1, 2] }])
check("get_multi", dc.get_multi(k["a"], k["obj"], k["zzz"]), { k["a"] => ">hello world", k["obj"] => { "x" => [1, 2] } })
check("cas ok", dc.cas(k["a"]) { |v| v + "!" }.is_a?(Integer), true)
check("after cas", dc.get(k["a"]), ">hello world!")
check("cas miss", dc.cas(k["nothere"]) { |v| v }, nil)
v, cas = dc.get_cas(k["a"])
check("get_cas", v, ">hello world!")
dc.set(k["a"], "changed", nil, raw: true)
check("set_cas stale", dc.set_cas(k["a"], "late", cas, nil, raw: true), false)
check("touch", dc.touch(k["a"], 100), true)
check("touch miss", dc.touch(k["nothere"], 100), nil)
check("gat", dc.gat(k["a"], 100), "changed")
check("set with ttl", dc.set(k["e"], "soon", 1, raw: true).is_a?(Integer), true)
sleep 2.1
check("expired", dc.get(k["e"]), nil)
big = "x" * (512 * 1024)
dc.set(k["big"], big, nil, raw: true)
check("large value", dc.get(k["big"]) == big, true)
stats = dc.stats
check("stats", stats.values.first.key?("pid"), true)
check("version", dc.version.values.first.is_a?(String), true)
puts "#{$passed} passed, #{$failed} failed"
exit($failed.zero? ? 0 : 1)
