package fsm

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/kvd-project/kvd/internal/command"
)

// TestMetaRules: one row per branch of the meta writes (the spec's
// "Semantics of each meta write", memcached's mg, ms, md and ma). As in
// TestItemRule, every entry is stamped t0 at index 100, and the stored
// item, when there is one, was stored 10 s before with CAS 40, flags 7,
// and goes a minute after t0, unless the row says otherwise.
func TestMetaRules(t *testing.T) {
	const index = 100
	const later = t0 + 60e9 // the stored item's expiry
	stored := func(value string, edit ...func(*command.Item)) *command.Item {
		it := &command.Item{Flags: 7, ExpiresAt: later, CAS: 40, StoredAt: t0 - 10e9, Value: []byte(value)}
		for _, e := range edit {
			e(it)
		}
		return it
	}
	expired := func(it *command.Item) { it.ExpiresAt = t0 }
	stale := func(it *command.Item) { it.Stale = true }
	tokenSent := func(it *command.Item) { it.TokenSent = true }
	fetched := func(it *command.Item) { it.Fetched, it.AccessedAt = true, t0-5e9 }
	noExpiry := func(it *command.Item) { it.ExpiresAt = 0 }
	zeroCAS := func(it *command.Item) { it.CAS = 0 }

	type edit = func(*command.Command)
	cmd := func(op command.Op, edit ...edit) command.Command {
		c := command.Command{Op: op, Key: []byte("k"), Stamp: t0}
		if op == command.OpMetaStore {
			c.Value, c.Flags, c.Mode, c.MaxSize = []byte("xy"), 3, command.ModeSet, 1<<20
		}
		for _, e := range edit {
			e(&c)
		}
		return c
	}
	meta := func(m command.MetaFlags) edit { return func(c *command.Command) { c.Meta |= m } }
	mode := func(m byte) edit { return func(c *command.Command) { c.Mode = m } }
	casIs := func(v uint64) edit {
		return func(c *command.Command) { c.Meta, c.CAS = c.Meta|command.MetaHasCAS, v }
	}
	newCASIs := func(v uint64) edit {
		return func(c *command.Command) { c.Meta, c.NewCAS = c.Meta|command.MetaHasNewCAS, v }
	}
	ttl := func(e int64) edit {
		return func(c *command.Command) { c.Meta, c.Exptime = c.Meta|command.MetaHasTTL, e }
	}
	exptime := func(e int64) edit { return func(c *command.Command) { c.Exptime = e } }
	vivify := func(e int64) edit {
		return func(c *command.Command) { c.Meta, c.Vivify = c.Meta|command.MetaVivify, e }
	}
	recache := func(e int64) edit {
		return func(c *command.Command) { c.Meta, c.Recache = c.Meta|command.MetaRecache, e }
	}
	delta := func(d uint64) edit { return func(c *command.Command) { c.Delta = d } }
	initial := func(n uint64) edit { return func(c *command.Command) { c.Initial = n } }
	flags := func(f uint32) edit { return func(c *command.Command) { c.Flags = f } }
	maxSize := func(n uint32) edit { return func(c *command.Command) { c.MaxSize = n } }
	invalidate, removeValue := meta(command.MetaInvalidate), meta(command.MetaRemoveValue)
	wantValue, noBump, decr := meta(command.MetaWantValue), meta(command.MetaNoBump), meta(command.MetaDecr)

	// fresh is what an ms stores with the defaults above: no meta state.
	fresh := func(cas uint64, value string) command.Item {
		return command.Item{Flags: 3, CAS: cas, StoredAt: t0, Value: []byte(value)}
	}
	stat := func(s command.Status) command.Result { return command.Result{Status: s} }
	storedAs := func(cas uint64) command.Result { return command.Result{Status: command.StatusStored, CAS: cas} }
	deleted := stat(command.StatusDeleted)
	// counter is what ma leaves of the stored item: a new item, no meta state.
	counter := func(n uint64, v string, edit ...func(*command.Item)) (command.Item, command.Result) {
		it := command.Item{Flags: 7, ExpiresAt: later, CAS: index, StoredAt: t0, Value: []byte(v)}
		for _, e := range edit {
			e(&it)
		}
		return it, command.Result{Status: command.StatusValue, Value: n, CAS: it.CAS,
			Item: command.Item{Flags: it.Flags, ExpiresAt: it.ExpiresAt, CAS: it.CAS}}
	}
	// read is the stored item after an mg that bumped it, and hit the
	// result describing it before the bump (h and l as they were).
	read := func(it *command.Item, edit ...func(*command.Item)) command.Item {
		next := *it
		for _, e := range edit {
			e(&next)
		}
		next.Fetched, next.AccessedAt = true, t0
		return next
	}
	hit := func(it *command.Item, value bool, edit ...func(*command.Item)) command.Result {
		desc := *it
		for _, e := range edit {
			e(&desc)
		}
		if !value {
			desc.Value = nil
		}
		return command.Result{Status: command.StatusHit, Item: desc, HadToken: it.TokenSent}
	}
	won := func(r command.Result) command.Result { r.Won = true; return r }

	type row struct {
		name string
		c    command.Command
		old  *command.Item // nil: nothing stored under the key
		v    verdict
		next command.Item // compared when v is put
		res  command.Result
	}
	var rows []row
	add := func(name string, c command.Command, old *command.Item, v verdict, next command.Item, res command.Result) {
		rows = append(rows, row{name, c, old, v, next, res})
	}
	none := command.Item{}

	// ms, set mode.
	add("ms miss", cmd(command.OpMetaStore), nil, put, fresh(index, "xy"), storedAs(index))
	add("ms mode 0 is set", cmd(command.OpMetaStore, mode(0)), stored("10"), put, fresh(index, "xy"), storedAs(index))
	add("ms over a stale item with a token sent stores a fresh one", cmd(command.OpMetaStore, exptime(30)),
		stored("10", stale, tokenSent, fetched), put,
		command.Item{Flags: 3, ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte("xy")}, storedAs(index))
	add("ms E chooses the CAS", cmd(command.OpMetaStore, newCASIs(7)), stored("10"), put, fresh(7, "xy"), storedAs(7))
	add("ms already expired drops the item", cmd(command.OpMetaStore, exptime(-1)), stored("10"), drop, none, storedAs(index)) // c shows the CAS it took, as memcached
	// ms, CAS mode (C with set or replace).
	add("ms C miss", cmd(command.OpMetaStore, casIs(40)), nil, leave, none, stat(command.StatusNotFound))
	add("ms C over an expired item", cmd(command.OpMetaStore, casIs(40)), stored("10", expired), leave, none, stat(command.StatusNotFound))
	add("ms C match", cmd(command.OpMetaStore, casIs(40)), stored("10", stale, tokenSent), put, fresh(index, "xy"), storedAs(index))
	add("ms C match with E", cmd(command.OpMetaStore, casIs(40), newCASIs(1000)), stored("10"), put, fresh(1000, "xy"), storedAs(1000))
	add("ms C mismatch", cmd(command.OpMetaStore, casIs(41)), stored("10"), leave, none, stat(command.StatusExists))
	add("ms C0 is no CAS: exists", cmd(command.OpMetaStore, casIs(0)), stored("10", zeroCAS), leave, none, stat(command.StatusExists))
	add("ms C older without I", cmd(command.OpMetaStore, casIs(39)), stored("10"), leave, none, stat(command.StatusExists))
	add("ms I with an older C stores stale, keeping expiry and token", cmd(command.OpMetaStore, casIs(39), invalidate, exptime(5)),
		stored("10", tokenSent, fetched), put,
		command.Item{Flags: 3, ExpiresAt: later, CAS: index, StoredAt: t0, Value: []byte("xy"), Stale: true, TokenSent: true}, storedAs(index))
	add("ms I with an older C, no token sent", cmd(command.OpMetaStore, casIs(39), invalidate, newCASIs(38)), stored("10"), put,
		command.Item{Flags: 3, ExpiresAt: later, CAS: 38, StoredAt: t0, Value: []byte("xy"), Stale: true}, storedAs(38))
	add("ms I with a newer C", cmd(command.OpMetaStore, casIs(41), invalidate), stored("10"), leave, none, stat(command.StatusExists))
	add("ms I with C0", cmd(command.OpMetaStore, casIs(0), invalidate), stored("10"), leave, none, stat(command.StatusExists))
	add("ms I with the item's C stores it plainly", cmd(command.OpMetaStore, casIs(40), invalidate), stored("10"), put, fresh(index, "xy"), storedAs(index))
	add("ms replace with C is CAS mode: a miss is not found", cmd(command.OpMetaStore, mode(command.ModeReplace), casIs(40)), nil,
		leave, none, stat(command.StatusNotFound))
	add("ms replace with C match", cmd(command.OpMetaStore, mode(command.ModeReplace), casIs(40)), stored("10"), put, fresh(index, "xy"), storedAs(index))
	add("ms replace with I and an older C", cmd(command.OpMetaStore, mode(command.ModeReplace), casIs(1), invalidate), stored("10"), put,
		command.Item{Flags: 3, ExpiresAt: later, CAS: index, StoredAt: t0, Value: []byte("xy"), Stale: true}, storedAs(index))
	// ms add and replace.
	add("ms add miss", cmd(command.OpMetaStore, mode(command.ModeAdd)), nil, put, fresh(index, "xy"), storedAs(index))
	add("ms add over an expired item", cmd(command.OpMetaStore, mode(command.ModeAdd)), stored("10", expired), put, fresh(index, "xy"), storedAs(index))
	add("ms add hit", cmd(command.OpMetaStore, mode(command.ModeAdd)), stored("10"), leave, none, stat(command.StatusNotStored))
	add("ms add ignores C", cmd(command.OpMetaStore, mode(command.ModeAdd), casIs(40)), stored("10"), leave, none, stat(command.StatusNotStored))
	add("ms add miss with C stores", cmd(command.OpMetaStore, mode(command.ModeAdd), casIs(40), newCASIs(5)), nil, put, fresh(5, "xy"), storedAs(5))
	add("ms replace miss", cmd(command.OpMetaStore, mode(command.ModeReplace)), nil, leave, none, stat(command.StatusNotStored))
	add("ms replace hit", cmd(command.OpMetaStore, mode(command.ModeReplace)), stored("10", fetched), put, fresh(index, "xy"), storedAs(index))
	// ms append and prepend.
	appended := func(v string) command.Item {
		return command.Item{Flags: 7, ExpiresAt: later, CAS: index, StoredAt: t0, Value: []byte(v)}
	}
	add("ms append miss", cmd(command.OpMetaStore, mode(command.ModeAppend)), nil, leave, none, stat(command.StatusNotStored))
	add("ms append miss with C", cmd(command.OpMetaStore, mode(command.ModeAppend), casIs(40)), nil, leave, none, stat(command.StatusNotStored))
	add("ms append keeps flags and expiry, not meta state", cmd(command.OpMetaStore, mode(command.ModeAppend), exptime(5), flags(1)),
		stored("10", stale, tokenSent, fetched), put, appended("10xy"), storedAs(index))
	add("ms prepend", cmd(command.OpMetaStore, mode(command.ModePrepend)), stored("10"), put, appended("xy10"), storedAs(index))
	add("ms append with C match", cmd(command.OpMetaStore, mode(command.ModeAppend), casIs(40)), stored("10"), put, appended("10xy"), storedAs(index))
	add("ms append with C mismatch", cmd(command.OpMetaStore, mode(command.ModeAppend), casIs(41)), stored("10"), leave, none, stat(command.StatusExists))
	add("ms append with C0 checks nothing", cmd(command.OpMetaStore, mode(command.ModeAppend), casIs(0)), stored("10"), put, appended("10xy"), storedAs(index))
	add("ms append with I and an older C", cmd(command.OpMetaStore, mode(command.ModeAppend), casIs(39), invalidate), stored("10"),
		leave, none, stat(command.StatusExists))
	add("ms prepend with E", cmd(command.OpMetaStore, mode(command.ModePrepend), newCASIs(9)), stored("10"), put,
		command.Item{Flags: 7, ExpiresAt: later, CAS: 9, StoredAt: t0, Value: []byte("xy10")}, storedAs(9))
	add("ms append at the size limit", cmd(command.OpMetaStore, mode(command.ModeAppend), maxSize(4)), stored("10"), put, appended("10xy"), storedAs(index))
	add("ms append past the size limit", cmd(command.OpMetaStore, mode(command.ModeAppend), maxSize(3)), stored("10"), leave, none, stat(command.StatusTooLarge))
	add("ms with an unknown mode", cmd(command.OpMetaStore, mode('X')), stored("10"), leave, none, stat(command.StatusInvalid))

	// md.
	add("md miss", cmd(command.OpMetaDelete), nil, leave, none, stat(command.StatusNotFound))
	add("md of an expired item drops it unseen", cmd(command.OpMetaDelete, invalidate), stored("10", expired), drop, none, stat(command.StatusNotFound))
	add("md hit", cmd(command.OpMetaDelete), stored("10"), drop, none, deleted)
	add("md with T alone deletes", cmd(command.OpMetaDelete, ttl(30)), stored("10"), drop, none, deleted)
	add("md C match", cmd(command.OpMetaDelete, casIs(40)), stored("10"), drop, none, deleted)
	add("md C mismatch", cmd(command.OpMetaDelete, casIs(39)), stored("10"), leave, none, stat(command.StatusExists))
	add("md C0 against an item", cmd(command.OpMetaDelete, casIs(0)), stored("10"), leave, none, stat(command.StatusExists))
	add("md I marks stale, clears the token, new CAS, keeps the rest", cmd(command.OpMetaDelete, invalidate),
		stored("10", tokenSent, fetched), put,
		command.Item{Flags: 7, ExpiresAt: later, CAS: index, StoredAt: t0 - 10e9, Value: []byte("10"), Stale: true, Fetched: true, AccessedAt: t0 - 5e9}, deleted)
	add("md I with T and E", cmd(command.OpMetaDelete, invalidate, ttl(30), newCASIs(77)), stored("10", noExpiry), put,
		command.Item{Flags: 7, ExpiresAt: t0 + 30e9, CAS: 77, StoredAt: t0 - 10e9, Value: []byte("10"), Stale: true}, deleted)
	add("md I with C match", cmd(command.OpMetaDelete, invalidate, casIs(40)), stored("10"), put,
		command.Item{Flags: 7, ExpiresAt: later, CAS: index, StoredAt: t0 - 10e9, Value: []byte("10"), Stale: true}, deleted)
	add("md I with a past T drops it", cmd(command.OpMetaDelete, invalidate, ttl(-1)), stored("10"), drop, none, deleted)
	add("md x keeps an empty item, the old CAS, no expiry", cmd(command.OpMetaDelete, removeValue),
		stored("10", stale, tokenSent, fetched), put,
		command.Item{CAS: 40, StoredAt: t0, Value: []byte{}}, deleted)
	add("md x with T and client flags", cmd(command.OpMetaDelete, removeValue, ttl(30), flags(9)), stored("10"), put,
		command.Item{Flags: 9, ExpiresAt: t0 + 30e9, CAS: 40, StoredAt: t0, Value: []byte{}}, deleted)
	add("md x with I: a stale tombstone", cmd(command.OpMetaDelete, removeValue, invalidate, newCASIs(5)), stored("10", tokenSent), put,
		command.Item{CAS: 5, StoredAt: t0, Value: []byte{}, Stale: true}, deleted)
	add("md x with E takes E's CAS", cmd(command.OpMetaDelete, removeValue, newCASIs(77)), stored("10"), put,
		command.Item{CAS: 77, StoredAt: t0, Value: []byte{}}, deleted)
	add("md x miss", cmd(command.OpMetaDelete, removeValue), nil, leave, none, stat(command.StatusNotFound))

	// ma.
	next, res := counter(15, "15")
	add("ma incr hit", cmd(command.OpMetaArith, delta(5)), stored("10"), put, next, res)
	// In place, as memcached rewrites a number that still fits.
	marked := stored("10", stale, tokenSent, fetched)
	kept := next
	kept.Fetched, kept.AccessedAt, kept.Stale, kept.TokenSent = marked.Fetched, marked.AccessedAt, marked.Stale, marked.TokenSent
	add("ma in place keeps the meta state", cmd(command.OpMetaArith, delta(5)), marked, put, kept, res)
	grown := stored("99", stale, tokenSent, fetched)
	add("ma outgrowing the item drops it", cmd(command.OpMetaArith, delta(1)), grown, put,
		command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index, StoredAt: t0, Value: []byte("100")},
		command.Result{Status: command.StatusValue, Value: 100, Grew: true, CAS: index,
			Item: command.Item{Flags: 7, ExpiresAt: t0 + 60e9, CAS: index}, PrevExpiresAt: t0 + 60e9})
	add("ma with C match", cmd(command.OpMetaArith, delta(5), casIs(40)), stored("10"), put, next, res)
	add("ma with C0 checks nothing", cmd(command.OpMetaArith, delta(5), casIs(0)), stored("10"), put, next, res)
	add("ma with C mismatch", cmd(command.OpMetaArith, delta(5), casIs(41)), stored("10"), leave, none, stat(command.StatusExists))
	add("ma of an empty value: non-numeric before C", cmd(command.OpMetaArith, delta(5), casIs(41)), stored(""), leave, none, stat(command.StatusNonNumeric))
	next, res = counter(9, "9 ")
	add("ma decr", cmd(command.OpMetaArith, delta(1), decr), stored("10"), put, next, res)
	next, res = counter(0, "0 ")
	add("ma decr floors at 0", cmd(command.OpMetaArith, delta(11), decr), stored("10"), put, next, res)
	next, res = counter(100, "100")
	res.Grew = true
	add("ma grew", cmd(command.OpMetaArith, delta(1)), stored("99"), put, next, res)
	next, res = counter(11, "11", func(it *command.Item) { it.ExpiresAt, it.CAS = t0+30e9, 6 })
	add("ma with T and E", cmd(command.OpMetaArith, delta(1), ttl(30), newCASIs(6)), stored("10"), put, next, res)
	_, res = counter(11, "11", func(it *command.Item) { it.ExpiresAt = 1 })
	res.CAS = 0
	add("ma with a past T drops it", cmd(command.OpMetaArith, delta(1), ttl(-1)), stored("10"), drop, none, res)
	add("ma non-numeric", cmd(command.OpMetaArith, delta(1)), stored("x1"), leave, none, stat(command.StatusNonNumeric))
	add("ma miss", cmd(command.OpMetaArith, delta(1), initial(5)), nil, leave, none, stat(command.StatusNotFound))
	add("ma expired without N", cmd(command.OpMetaArith, delta(1)), stored("10", expired), leave, none, stat(command.StatusNotFound))
	add("ma N creates the initial value, flags 0, N's expiry", cmd(command.OpMetaArith, delta(5), initial(7), vivify(30)), nil, put,
		command.Item{ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte("7")},
		command.Result{Status: command.StatusValue, Value: 7, Created: true, CAS: index, Item: command.Item{ExpiresAt: t0 + 30e9, CAS: index}})
	// memcached applies N and T in the client's order: the later wins.
	add("ma N then T creates with T's expiry", cmd(command.OpMetaArith, delta(5), initial(7), vivify(30), ttl(90)), nil, put,
		command.Item{ExpiresAt: t0 + 90e9, CAS: index, StoredAt: t0, Value: []byte("7")},
		command.Result{Status: command.StatusValue, Value: 7, Created: true, CAS: index, Item: command.Item{ExpiresAt: t0 + 90e9, CAS: index}})
	add("ma T then N creates with N's expiry", cmd(command.OpMetaArith, delta(5), initial(7), ttl(90), vivify(30), meta(command.MetaVivifyLast)), nil, put,
		command.Item{ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte("7")},
		command.Result{Status: command.StatusValue, Value: 7, Created: true, CAS: index, Item: command.Item{ExpiresAt: t0 + 30e9, CAS: index}})
	add("ma N with E over an expired item", cmd(command.OpMetaArith, delta(5), vivify(0), newCASIs(3), decr), stored("10", expired, stale), put,
		command.Item{CAS: 3, StoredAt: t0, Value: []byte("0")},
		command.Result{Status: command.StatusValue, Value: 0, Created: true, CAS: 3, Item: command.Item{CAS: 3}})
	add("ma N already expired stores nothing", cmd(command.OpMetaArith, delta(5), vivify(-1), initial(2)), nil, leave, none,
		command.Result{Status: command.StatusValue, Value: 2, Created: true, Item: command.Item{ExpiresAt: 1, CAS: index}})

	// mg.
	plain := stored("10")
	add("mg miss", cmd(command.OpMetaGet, wantValue), nil, leave, none, stat(command.StatusNotFound))
	add("mg of an expired item", cmd(command.OpMetaGet, ttl(30)), stored("10", expired), leave, none, stat(command.StatusNotFound))
	add("mg N creates an empty item and wins it", cmd(command.OpMetaGet, vivify(30), wantValue), nil, put,
		command.Item{ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte{}, TokenSent: true, Fetched: true, AccessedAt: t0},
		command.Result{Status: command.StatusHit, Created: true, Won: true,
			Item: command.Item{ExpiresAt: t0 + 30e9, CAS: index, StoredAt: t0, Value: []byte{}, TokenSent: true}})
	add("mg N with u and E over an expired item", cmd(command.OpMetaGet, vivify(0), noBump, newCASIs(8)), stored("10", expired), put,
		command.Item{CAS: 8, StoredAt: t0, Value: []byte{}, TokenSent: true},
		command.Result{Status: command.StatusHit, Created: true, Won: true, Item: command.Item{CAS: 8, StoredAt: t0, TokenSent: true}})
	add("mg E without N changes nothing", cmd(command.OpMetaGet, newCASIs(8), noBump), plain, leave, none, hit(plain, false))
	add("mg bumps: fetched, accessed now (the result: before)", cmd(command.OpMetaGet), stored("10", fetched), put,
		read(stored("10")), hit(stored("10", fetched), false))
	add("mg with v copies the value", cmd(command.OpMetaGet, wantValue), plain, put, read(plain), hit(plain, true))
	add("mg with u and nothing else leaves the item", cmd(command.OpMetaGet, noBump, wantValue), plain, leave, none, hit(plain, true))
	add("mg twice in one stamp changes nothing", cmd(command.OpMetaGet), stored("10", func(it *command.Item) { it.Fetched, it.AccessedAt = true, t0 }),
		leave, none, hit(stored("10", func(it *command.Item) { it.Fetched, it.AccessedAt = true, t0 }), false))
	withT := func(it *command.Item) { it.ExpiresAt = t0 + 30e9 }
	add("mg T", cmd(command.OpMetaGet, ttl(30), noBump), plain, put, *stored("10", withT), hit(plain, false, withT))
	add("mg T to the past drops it", cmd(command.OpMetaGet, ttl(-1), noBump), plain, drop, none,
		hit(plain, false, func(it *command.Item) { it.ExpiresAt = 1 }))
	win := func(it *command.Item) { it.TokenSent = true }
	add("mg R wins when the item expires before R", cmd(command.OpMetaGet, recache(90), noBump), plain, put,
		*stored("10", win), won(hit(plain, false, win)))
	add("mg R at the item's expiry does not win", cmd(command.OpMetaGet, recache(60), noBump), plain, leave, none, hit(plain, false))
	add("mg R 0 never wins", cmd(command.OpMetaGet, recache(0), noBump), plain, leave, none, hit(plain, false))
	add("mg R on an item that never expires", cmd(command.OpMetaGet, recache(90), noBump), stored("10", noExpiry), leave, none,
		hit(stored("10", noExpiry), false))
	sent := stored("10", tokenSent)
	add("mg R when the token is out: Z, no win", cmd(command.OpMetaGet, recache(90), noBump), sent, leave, none, hit(sent, false))
	add("mg R after T judges T's expiry", cmd(command.OpMetaGet, ttl(120), recache(90), meta(command.MetaRecacheAfterTTL)), plain, put,
		read(plain, withT2(t0+120e9)), hit(plain, false, withT2(t0+120e9)))
	add("mg R compares the expiry before T", cmd(command.OpMetaGet, recache(90), ttl(120)), plain, put,
		read(plain, withT2(t0+120e9), win), won(hit(plain, false, withT2(t0+120e9), win)))
	add("mg R with a T that would win does not", cmd(command.OpMetaGet, recache(90), ttl(30)), stored("10", withT2(t0+100e9)), put,
		read(stored("10", withT2(t0+100e9)), withT), hit(stored("10", withT2(t0+100e9)), false, withT))
	staleItem := stored("10", stale)
	add("mg of a stale item wins its token", cmd(command.OpMetaGet, noBump), staleItem, put, *stored("10", stale, win),
		won(hit(staleItem, false, win)))
	staleSent := stored("10", stale, tokenSent)
	add("mg of a stale item whose token is out: Z", cmd(command.OpMetaGet, noBump, wantValue), staleSent, leave, none, hit(staleSent, true))
	add("mg N on a hit is a plain read", cmd(command.OpMetaGet, vivify(30), noBump), plain, leave, none, hit(plain, false))
	add("mg T and N on a hit: T", cmd(command.OpMetaGet, vivify(300), ttl(30), noBump), plain, put, *stored("10", withT), hit(plain, false, withT))

	for _, tc := range rows {
		t.Run(tc.name, func(t *testing.T) {
			old, exists := command.Item{}, tc.old != nil
			if exists {
				old = *tc.old
			}
			oldValue := string(old.Value)
			next, v, res := itemRule(&tc.c, &old, exists, horizons{}, index)
			require.Equal(t, tc.v, v, "verdict")
			if v == put {
				require.Equal(t, tc.next, next, "next item")
				if len(next.Value) > 0 && len(old.Value) > 0 {
					require.NotSame(t, &old.Value[0], &next.Value[0], "next shares old's value")
				}
			}
			want := tc.res
			if isMetaRead := tc.c.Op == command.OpMetaGet || tc.c.Op == command.OpMetaArith; isMetaRead && exists && !want.Created &&
				(want.Status == command.StatusHit || want.Status == command.StatusValue) {
				want.PrevExpiresAt = tc.old.ExpiresAt // what a t before T reports
			}
			require.Equal(t, want, res, "result")
			if len(res.Item.Value) > 0 && len(old.Value) > 0 {
				require.NotSame(t, &old.Value[0], &res.Item.Value[0], "the result shares old's value")
			}
			require.Equal(t, oldValue, string(old.Value), "the rule changed the stored item")
		})
	}
}

func withT2(at int64) func(*command.Item) { return func(it *command.Item) { it.ExpiresAt = at } }

// TestMetaStaleThenToken: the item md I (or ms I) marks stale is won by
// the first mg (W), and every mg after it sees the token out (Z) and wins
// nothing, until a store replaces the item.
func TestMetaStaleThenToken(t *testing.T) {
	it := command.Item{Flags: 1, ExpiresAt: t0 + 60e9, CAS: 40, StoredAt: t0 - 10e9, Value: []byte("v")}
	apply := func(c command.Command, index uint64) command.Result {
		t.Helper()
		c.Key, c.Stamp = []byte("k"), t0+int64(index)
		next, v, res := itemRule(&c, &it, true, horizons{}, index)
		if v == put {
			it = next
		}
		require.NotEqual(t, drop, v)
		return res
	}
	require.Equal(t, command.StatusDeleted, apply(command.Command{Op: command.OpMetaDelete, Meta: command.MetaInvalidate}, 50).Status)
	require.True(t, it.Stale)
	require.Equal(t, uint64(50), it.CAS)

	first := apply(command.Command{Op: command.OpMetaGet}, 51)
	require.True(t, first.Won)
	require.False(t, first.HadToken)
	require.True(t, first.Item.Stale)
	require.True(t, first.Item.TokenSent)
	require.False(t, first.Item.Fetched, "h: not fetched before this read")

	second := apply(command.Command{Op: command.OpMetaGet, Meta: command.MetaRecache, Recache: 3600}, 52)
	require.False(t, second.Won)
	require.True(t, second.HadToken)
	require.True(t, second.Item.Fetched)
	require.Equal(t, t0+51, second.Item.AccessedAt, "l: the first read's stamp")

	// The winner recaches with the CAS it read: the item is fresh again.
	store := apply(command.Command{Op: command.OpMetaStore, Mode: command.ModeSet, Meta: command.MetaHasCAS, CAS: 50, Value: []byte("new")}, 53)
	require.Equal(t, command.StatusStored, store.Status)
	require.False(t, it.Stale || it.TokenSent || it.Fetched)

	// md I again, and a late writer whose CAS is older than the item's
	// stores its value, still stale, with the token still out.
	apply(command.Command{Op: command.OpMetaDelete, Meta: command.MetaInvalidate}, 54)
	require.True(t, apply(command.Command{Op: command.OpMetaGet}, 55).Won)
	late := apply(command.Command{Op: command.OpMetaStore, Mode: command.ModeSet, Meta: command.MetaHasCAS | command.MetaInvalidate, CAS: 53, Value: []byte("late")}, 56)
	require.Equal(t, command.StatusStored, late.Status)
	require.True(t, it.Stale && it.TokenSent)
	require.Equal(t, "late", string(it.Value))
	third := apply(command.Command{Op: command.OpMetaGet}, 57)
	require.False(t, third.Won)
	require.True(t, third.HadToken)
}

// TestAccessRule: an OpAccess marks only the version its reader saw, and
// only while it is visible.
func TestAccessRule(t *testing.T) {
	live := command.Item{ExpiresAt: t0 + 1, CAS: 40, StoredAt: t0 - 10e9, Value: []byte("v")}
	gone := command.Item{ExpiresAt: t0, CAS: 40, StoredAt: t0 - 10e9}
	marked := live
	marked.Fetched, marked.AccessedAt = true, t0
	earlier := live
	earlier.Fetched, earlier.AccessedAt, earlier.Stale, earlier.TokenSent = true, t0-5e9, true, true
	for _, tc := range []struct {
		name   string
		old    command.Item
		exists bool
		cas    uint64
		h      horizons
		ok     bool
		stored int64 // the version's stamp as read; 0: live's
	}{
		{"as read", live, true, 40, horizons{}, true, 0},
		{"same CAS, stored since (md x, E)", live, true, 40, horizons{}, false, live.StoredAt - 1},
		{"changed since", live, true, 41, horizons{}, false, 0},
		{"deleted since", command.Item{}, false, 40, horizons{}, false, 0},
		{"expired", gone, true, 40, horizons{}, false, 0},
		{"hidden by a passed flush_all", live, true, 40, horizons{at: t0 - 5e9}, false, 0},
		{"already marked at this stamp", marked, true, 40, horizons{}, false, 0},
		{"marked before", earlier, true, 40, horizons{}, true, 0},
	} {
		old := tc.old
		stored := tc.stored
		if stored == 0 {
			stored = live.StoredAt
		}
		next, ok := accessRule(&old, tc.exists, command.KeyCAS{CAS: tc.cas, StoredAt: stored}, tc.h, t0)
		require.Equal(t, tc.ok, ok, tc.name)
		if ok {
			want := tc.old
			want.Fetched, want.AccessedAt = true, t0
			require.Equal(t, want, next, tc.name)
		}
		require.Equal(t, tc.old, old, "%s: the rule changed the stored item", tc.name)
	}
}
