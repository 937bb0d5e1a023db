package fsm

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestItemRule: one row per op and outcome, with no store. Every entry is
// stamped t0 at index 100; the stored item, when there is one, was stored
// 10 s before with CAS 40 and goes a minute after t0, unless the row says
// otherwise.
func TestItemRule(t *testing.T) {
	const index = 100
	stored := func(value string, edit ...func(*command.Item)) *command.Item {
		it := &command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: 40, StoredAt: t0 - 10e9, Value: []byte(value)}
		for _, e := range edit {
			e(it)
		}
		return it
	}
	expired := func(it *command.Item) { it.ExpiresAt = t0 }
	cmd := func(op command.Op, edit ...func(*command.Command)) command.Command {
		c := command.Command{Op: op, Key: []byte("k"), Value: []byte("xy"), Flags: 3, Stamp: t0, MaxSize: 1 << 20}
		for _, e := range edit {
			e(&c)
		}
		return c
	}
	exptime := func(e int64) func(*command.Command) { return func(c *command.Command) { c.Exptime = e } }
	delta := func(d uint64) func(*command.Command) { return func(c *command.Command) { c.Delta = d } }
	// fresh is the item a set-like command stores with the defaults above.
	fresh := func(expiresAt int64) command.Item {
		return command.Item{Flags: 3, ExpiresAt: expiresAt, CAS: index, StoredAt: t0, Value: []byte("xy")}
	}
	stat := func(s command.Status) command.Result { return command.Result{Status: s} }
	counter := func(n uint64, v string, grew bool) (command.Item, command.Result) {
		return command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte(v)},
			command.Result{Status: command.StatusValue, Value: n, Grew: grew, CAS: index}
	}
	touched := command.Item{Flags: 7, ExpiresAt: t0 + 30e9, CAS: 40, StoredAt: t0 - 10e9, Value: []byte("10")}

	type row struct {
		name string
		c    command.Command
		old  *command.Item // nil: nothing stored under the key
		h    horizons
		v    verdict
		next command.Item // compared when v is put
		res  command.Result
	}
	rows := []row{
		{name: "set miss", c: cmd(command.OpSet), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "set hit", c: cmd(command.OpSet), old: stored("10"), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "set relative exptime", c: cmd(command.OpSet, exptime(10)), v: put, next: fresh(t0 + 10e9), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "set absolute exptime", c: cmd(command.OpSet, exptime(t0/1e9+100)), v: put, next: fresh(t0 + 100e9), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "set negative exptime over nothing", c: cmd(command.OpSet, exptime(-1)), v: leave, res: stat(command.StatusStored)},
		{name: "set negative exptime over an item", c: cmd(command.OpSet, exptime(-1)), old: stored("10"), v: drop, res: stat(command.StatusStored)},
		{name: "set past absolute exptime", c: cmd(command.OpSet, exptime(2592001)), old: stored("10"), v: drop, res: stat(command.StatusStored)},

		{name: "add miss", c: cmd(command.OpAdd), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "add hit", c: cmd(command.OpAdd), old: stored("10"), v: leave, res: stat(command.StatusNotStored)},
		{name: "add over an expired item", c: cmd(command.OpAdd), old: stored("10", expired), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "add over an item a passed flush_all hides", c: cmd(command.OpAdd), old: stored("10"), h: horizons{at: t0 - 5e9},
			v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "add over an item a flush_all yet to come will hide", c: cmd(command.OpAdd), old: stored("10"), h: horizons{at: t0 + 5e9},
			v: leave, res: stat(command.StatusNotStored)},
		{name: "add over an item stored after the flush_all's time", c: cmd(command.OpAdd), old: stored("10"), h: horizons{at: t0 - 20e9},
			v: leave, res: stat(command.StatusNotStored)},
		{name: "add over an item hidden for good by a replaced flush_all", c: cmd(command.OpAdd), old: stored("10"), h: horizons{at: t0 + 5e9, before: t0 - 5e9},
			v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},

		{name: "replace miss", c: cmd(command.OpReplace), v: leave, res: stat(command.StatusNotStored)},
		{name: "replace hit", c: cmd(command.OpReplace), old: stored("10"), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "replace expired", c: cmd(command.OpReplace), old: stored("10", expired), v: leave, res: stat(command.StatusNotStored)},

		{name: "cas miss", c: cmd(command.OpCAS, func(c *command.Command) { c.CAS = 40 }), v: leave, res: stat(command.StatusNotFound)},
		{name: "cas expired", c: cmd(command.OpCAS, func(c *command.Command) { c.CAS = 40 }), old: stored("10", expired), v: leave, res: stat(command.StatusNotFound)},
		{name: "cas exists", c: cmd(command.OpCAS, func(c *command.Command) { c.CAS = 39 }), old: stored("10"), v: leave, res: stat(command.StatusExists)},
		{name: "cas hit", c: cmd(command.OpCAS, func(c *command.Command) { c.CAS = 40 }), old: stored("10"), v: put, next: fresh(0), res: command.Result{Status: command.StatusStored, CAS: index}},

		{name: "append miss", c: cmd(command.OpAppend), v: leave, res: stat(command.StatusNotStored)},
		{name: "append hit keeps flags and expiry", c: cmd(command.OpAppend, exptime(5)), old: stored("10"), v: put,
			next: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("10xy")}, res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "prepend hit", c: cmd(command.OpPrepend), old: stored("10"), v: put,
			next: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("xy10")}, res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "append at the size limit", c: cmd(command.OpAppend, func(c *command.Command) { c.MaxSize = 4 }), old: stored("10"), v: put,
			next: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("10xy")}, res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "append past the size limit", c: cmd(command.OpAppend, func(c *command.Command) { c.MaxSize = 3 }), old: stored("10"), v: leave, res: stat(command.StatusTooLarge)},
		{name: "prepend to an expired item", c: cmd(command.OpPrepend), old: stored("10", expired), v: leave, res: stat(command.StatusNotStored)},

		{name: "incr miss", c: cmd(command.OpIncr, delta(1)), v: leave, res: stat(command.StatusNotFound)},
		{name: "incr expired", c: cmd(command.OpIncr, delta(1)), old: stored("10", expired), v: leave, res: stat(command.StatusNotFound)},
		{name: "incr non-numeric", c: cmd(command.OpIncr, delta(1)), old: stored("1x"), v: leave, res: stat(command.StatusNonNumeric)},
		{name: "decr non-numeric", c: cmd(command.OpDecr, delta(1)), old: stored(""), v: leave, res: stat(command.StatusNonNumeric)},
	}
	add := func(name string, c command.Command, old *command.Item, next command.Item, res command.Result) {
		rows = append(rows, row{name: name, c: c, old: old, v: put, next: next, res: res})
	}
	next, res := counter(15, "15", false)
	add("incr hit", cmd(command.OpIncr, delta(5)), stored("10"), next, res)
	next, res = counter(100, "100", true)
	add("incr grew", cmd(command.OpIncr, delta(1)), stored("99"), next, res)
	next, res = counter(1, "1"+strings.Repeat(" ", 19), false)
	add("incr wraps at 2^64", cmd(command.OpIncr, delta(2)), stored("18446744073709551615"), next, res)
	next, res = counter(12, "12  ", false)
	add("incr of a padded counter keeps its length", cmd(command.OpIncr, delta(2)), stored("10  "), next, res)
	next, res = counter(9, "9 ", false)
	add("decr shrinks in place", cmd(command.OpDecr, delta(1)), stored("10"), next, res)
	next, res = counter(0, "0 ", false)
	add("decr floors at 0", cmd(command.OpDecr, delta(20)), stored("10"), next, res)

	// OpArith: incr and decr with a CAS to match and a counter to create.
	arith := func(edit ...func(*command.Command)) command.Command { return cmd(command.OpArith, edit...) }
	casOf := func(v uint64) func(*command.Command) { return func(c *command.Command) { c.CAS = v } }
	decr := func(c *command.Command) { c.Decr = true }
	create := func(initial uint64) func(*command.Command) {
		return func(c *command.Command) { c.Create, c.Initial = true, initial }
	}
	next, res = counter(15, "15", false)
	add("arith incr hit", arith(delta(5)), stored("10"), next, res)
	add("arith incr with the item's CAS", arith(delta(5), casOf(40)), stored("10"), next, res)
	next, res = counter(9, "9 ", false)
	add("arith decr", arith(delta(1), decr), stored("10"), next, res)
	add("arith on a miss creates the initial value, flags 0, the command's expiry",
		arith(delta(5), create(7), exptime(30)), nil,
		command.Item{Flags: 0, ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte("7")},
		command.Result{Status: command.StatusValue, Value: 7, Created: true, CAS: index})
	add("arith creates over an expired item", arith(delta(5), create(0), decr), stored("10", expired),
		command.Item{Flags: 0, CAS: index, StoredAt: t0, Value: []byte("0")},
		command.Result{Status: command.StatusValue, Value: 0, Created: true, CAS: index})

	rows = append(rows, []row{
		{name: "arith miss without create", c: arith(delta(1)), v: leave, res: stat(command.StatusNotFound)},
		{name: "arith with a stale CAS", c: arith(delta(1), casOf(39)), old: stored("10"), v: leave, res: stat(command.StatusExists)},
		{name: "arith non-numeric", c: arith(delta(1)), old: stored("x"), v: leave, res: stat(command.StatusNonNumeric)},
		{name: "arith creating an already expired counter stores nothing", c: arith(delta(1), create(3), exptime(-1)), v: leave,
			res: command.Result{Status: command.StatusValue, Value: 3, Created: true}},

		{name: "delete_cas miss", c: cmd(command.OpDeleteCAS, casOf(40)), v: leave, res: stat(command.StatusNotFound)},
		{name: "delete_cas stale", c: cmd(command.OpDeleteCAS, casOf(39)), old: stored("10"), v: leave, res: stat(command.StatusExists)},
		{name: "delete_cas hit", c: cmd(command.OpDeleteCAS, casOf(40)), old: stored("10"), v: drop, res: stat(command.StatusDeleted)},

		{name: "append_cas miss", c: cmd(command.OpAppendCAS, casOf(40)), v: leave, res: stat(command.StatusNotStored)},
		{name: "append_cas stale", c: cmd(command.OpAppendCAS, casOf(39)), old: stored("10"), v: leave, res: stat(command.StatusExists)},
		{name: "append_cas hit", c: cmd(command.OpAppendCAS, casOf(40)), old: stored("10"), v: put,
			next: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("10xy")}, res: command.Result{Status: command.StatusStored, CAS: index}},
		{name: "prepend_cas hit", c: cmd(command.OpPrependCAS, casOf(40)), old: stored("10"), v: put,
			next: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("xy10")}, res: command.Result{Status: command.StatusStored, CAS: index}},
	}...)

	rows = append(rows, []row{
		{name: "touch miss", c: cmd(command.OpTouch, exptime(30)), v: leave, res: stat(command.StatusNotFound)},
		{name: "touch expired", c: cmd(command.OpTouch, exptime(30)), old: stored("10", expired), v: leave, res: stat(command.StatusNotFound)},
		{name: "touch hit keeps CAS and stored time", c: cmd(command.OpTouch, exptime(30)), old: stored("10"), v: put, next: touched,
			res: command.Result{Status: command.StatusTouched, Item: command.Item{Flags: 7, ExpiresAt: t0 + 30e9, CAS: 40, StoredAt: t0 - 10e9}}},
		{name: "touch to the past drops the item", c: cmd(command.OpTouch, exptime(-1)), old: stored("10"), v: drop,
			res: command.Result{Status: command.StatusTouched, Item: command.Item{Flags: 7, ExpiresAt: 1, CAS: 40, StoredAt: t0 - 10e9}}},
		{name: "gat miss", c: cmd(command.OpGAT, exptime(30)), v: leave, res: stat(command.StatusNotFound)},
		{name: "gat hit", c: cmd(command.OpGAT, exptime(30)), old: stored("10"), v: put, next: touched, res: command.Result{Status: command.StatusHit, Item: touched}},

		{name: "delete miss", c: cmd(command.OpDelete), v: leave, res: stat(command.StatusNotFound)},
		{name: "delete hit", c: cmd(command.OpDelete), old: stored("10"), v: drop, res: stat(command.StatusDeleted)},
		{name: "delete expired drops it unseen", c: cmd(command.OpDelete), old: stored("10", expired), v: drop, res: stat(command.StatusNotFound)},
		{name: "delete of an item a passed flush_all hides", c: cmd(command.OpDelete), old: stored("10"), h: horizons{at: t0 - 5e9},
			v: drop, res: stat(command.StatusNotFound)},

		{name: "not an item's op", c: cmd(command.OpFlush), old: stored("10"), v: leave, res: stat(command.StatusInvalid)},
	}...)

	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			old, exists := command.Item{}, tc.old != nil
			if exists {
				old = *tc.old
			}
			oldValue := string(old.Value)
			next, v, res := itemRule(&tc.c, &old, exists, tc.h, index)
			require.Equal(t, tc.v, v, "verdict")
			if v == put {
				require.Equal(t, tc.next, next, "next item")
			}
			require.Equal(t, tc.res, res, "result")
			require.Equal(t, oldValue, string(old.Value), "the rule changed the stored item")
		})
	}
}

// TestExpireRule: the sweeper's delete takes only the version it saw, and
// only once that version is gone at the entry's time.
func TestExpireRule(t *testing.T) {
	gone := command.Item{ExpiresAt: t0, CAS: 40, StoredAt: t0 - 10e9}
	live := command.Item{ExpiresAt: t0 + 1, CAS: 40, StoredAt: t0 - 10e9}
	for _, tc := range []struct {
		name   string
		old    command.Item
		exists bool
		cas    uint64
		h      horizons
		want   bool
	}{
		{"expired, as seen", gone, true, 40, horizons{}, true},
		{"expired, but changed since", gone, true, 41, horizons{}, false},
		{"touched since", live, true, 40, horizons{}, false},
		{"deleted since", command.Item{}, false, 40, horizons{}, false},
		{"hidden by a passed flush_all", live, true, 40, horizons{at: t0 - 5e9}, true},
		{"hidden for good by a replaced flush_all", live, true, 40, horizons{before: t0 - 5e9}, true},
		{"a flush_all yet to come", live, true, 40, horizons{at: t0 + 5e9}, false},
	} {
		require.Equal(t, tc.want, expireRule(&tc.old, tc.exists, tc.cas, tc.h, t0), tc.name)
	}
}
