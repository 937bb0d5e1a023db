package fsm

import "github.com/kvd-project/kvd/internal/command"

// The meta commands' item rules: memcached 1.6.18's mg, ms, md and ma as
// they change the item (process_mget_command, process_mset_command with
// do_store_item, process_mdelete_command, process_marithmetic_command),
// with newer memcached's E (the client chooses the changed item's CAS) and
// md's x (keep the item with an empty value). itemRule hands them the
// same arguments it takes and they answer the same way: pure functions,
// whose next never shares old's storage.
//
// Times in the command are raw exptimes (T, N's and R's), turned into
// instants from the entry's stamp by command.ExpiryOf, as every rule does. An item
// a meta write stores anew has no meta state (not fetched, accessed when
// stored, not stale, no token sent) unless its rule says otherwise.

// newCAS is the CAS a meta write gives the item it changes: the client's
// (E) when it chose one, else the entry's index.
func newCAS(c *command.Command, index uint64) uint64 {
	if c.Meta&command.MetaHasNewCAS != 0 {
		return c.NewCAS
	}
	return index
}

func notStored(s command.Status) (command.Item, verdict, command.Result) {
	return command.Item{}, leave, command.Result{Status: s}
}

// metaStoreRule is ms. C (MetaHasCAS) turns set and replace into a compare
// and swap, where a token of 0 never matches (memcached's "no CAS") and,
// with I, a token older than the item's stores the value anyway, marked
// stale, keeping the item's expiry and its token state. Add ignores C;
// append and prepend check it unless it is 0.
func metaStoreRule(c *command.Command, old *command.Item, exists, live bool, index uint64) (command.Item, verdict, command.Result) {
	next := command.Item{Flags: c.Flags, ExpiresAt: command.ExpiryOf(c.Exptime, c.Stamp), CAS: newCAS(c, index), StoredAt: c.Stamp, Value: c.Value,
		KeyBinary: c.Meta&command.MetaKeyBinary != 0}
	hasCAS := c.Meta&command.MetaHasCAS != 0
	mode := c.Mode
	if mode == 0 {
		mode = command.ModeSet // as Encode writes it
	}
	switch {
	case hasCAS && (mode == command.ModeSet || mode == command.ModeReplace):
		if !live {
			return notStored(command.StatusNotFound)
		}
		switch {
		case c.CAS != 0 && c.CAS == old.CAS:
		case c.CAS != 0 && c.CAS < old.CAS && c.Meta&command.MetaInvalidate != 0:
			next.ExpiresAt, next.Stale, next.TokenSent = old.ExpiresAt, true, old.TokenSent
		default:
			return notStored(command.StatusExists)
		}
	case mode == command.ModeSet:
	case mode == command.ModeAdd:
		if live {
			return notStored(command.StatusNotStored)
		}
	case mode == command.ModeReplace:
		if !live {
			return notStored(command.StatusNotStored)
		}
	case mode == command.ModeAppend || mode == command.ModePrepend:
		if !live {
			return notStored(command.StatusNotStored)
		}
		if hasCAS && c.CAS != 0 && c.CAS != old.CAS {
			return notStored(command.StatusExists)
		}
		if uint64(len(old.Value))+uint64(len(c.Value)) > uint64(c.MaxSize) {
			return notStored(command.StatusTooLarge)
		}
		val := make([]byte, 0, len(old.Value)+len(c.Value))
		if mode == command.ModeAppend {
			val = append(append(val, old.Value...), c.Value...)
		} else {
			val = append(append(val, c.Value...), old.Value...)
		}
		// A new item with the old one's flags and expiry, as append makes,
		// and, as memcached allocates one, no base64 mark.
		next.Flags, next.ExpiresAt, next.Value, next.KeyBinary = old.Flags, old.ExpiresAt, val, false
	default:
		return notStored(command.StatusInvalid) // Decode admits no other mode
	}
	// The CAS the item took, even when its expiry has already passed and
	// nothing is kept: ms's c shows it, as memcached's does.
	res := command.Result{Status: command.StatusStored, CAS: next.CAS}
	return next, putOrDrop(&next, exists, c.Stamp), res
}

// metaDeleteRule is md. Without I or x it deletes. x puts an empty item in
// the old one's place (client flags from the command, the expiry of T or
// none, the old CAS: newer memcached's tombstone); I keeps the item (or
// that tombstone) and marks it stale, with no token sent so that the next
// reader wins one, a new CAS and, with T, a new expiry.
func metaDeleteRule(c *command.Command, old *command.Item, exists, live bool, index uint64) (command.Item, verdict, command.Result) {
	if !live {
		// A stored item no longer visible goes, as delete drops it.
		v := leave
		if exists {
			v = drop
		}
		return command.Item{}, v, command.Result{Status: command.StatusNotFound}
	}
	if c.Meta&command.MetaHasCAS != 0 && c.CAS != old.CAS {
		return notStored(command.StatusExists)
	}
	removeValue, invalidate := c.Meta&command.MetaRemoveValue != 0, c.Meta&command.MetaInvalidate != 0
	if !removeValue && !invalidate {
		return command.Item{}, drop, command.Result{Status: command.StatusDeleted}
	}
	var next command.Item
	if removeValue {
		// The old item's CAS, or E's (newer memcached's do_store_item of
		// the empty item).
		next = command.Item{Flags: c.Flags, CAS: newCAS(c, old.CAS), StoredAt: c.Stamp, Value: []byte{}}
		if c.Meta&command.MetaHasTTL != 0 {
			next.ExpiresAt = command.ExpiryOf(c.Exptime, c.Stamp)
		}
	} else {
		next = *old
		next.Value = append([]byte(nil), old.Value...)
	}
	if invalidate {
		next.Stale, next.TokenSent, next.CAS = true, false, newCAS(c, index)
		if c.Meta&command.MetaHasTTL != 0 {
			next.ExpiresAt = command.ExpiryOf(c.Exptime, c.Stamp)
		}
	}
	return next, putOrDrop(&next, exists, c.Stamp), command.Result{Status: command.StatusDeleted}
}

// metaArithRule is ma: OpArith with a CAS to match (0: none, as memcached's
// do_add_delta takes it), a counter created by N (its expiry N's exptime),
// E's CAS and T's new expiry. Its result carries the number, and the
// item's flags, expiry and CAS (ma's t and c); never its value.
func metaArithRule(c *command.Command, old *command.Item, exists, live bool, index uint64) (command.Item, verdict, command.Result) {
	if !live {
		if c.Meta&command.MetaVivify == 0 {
			return notStored(command.StatusNotFound)
		}
		next := command.Item{ExpiresAt: createdExpiry(c), CAS: newCAS(c, index), StoredAt: c.Stamp, Value: formatCounter(c.Initial, 0)}
		v := putOrDrop(&next, exists, c.Stamp)
		res := command.Result{Status: command.StatusValue, Value: c.Initial, Created: true,
			Item: command.Item{ExpiresAt: next.ExpiresAt, CAS: next.CAS}}
		if v == put {
			res.CAS = next.CAS
		}
		return next, v, res
	}
	if len(old.Value) == 0 {
		// memcached refuses an empty value before it compares the CAS.
		return notStored(command.StatusNonNumeric)
	}
	if c.Meta&command.MetaHasCAS != 0 && c.CAS != 0 && c.CAS != old.CAS {
		return notStored(command.StatusExists)
	}
	n, ok := parseCounter(old.Value)
	if !ok {
		return notStored(command.StatusNonNumeric)
	}
	switch {
	case c.Meta&command.MetaDecr == 0:
		n += c.Delta // wraps at 2^64, as memcached does
	case c.Delta > n:
		n = 0
	default:
		n -= c.Delta
	}
	next := command.Item{Flags: old.Flags, ExpiresAt: old.ExpiresAt, CAS: newCAS(c, index), StoredAt: c.Stamp,
		Value: formatCounter(n, len(old.Value))}
	inPlace(&next, old)
	if c.Meta&command.MetaHasTTL != 0 {
		next.ExpiresAt = command.ExpiryOf(c.Exptime, c.Stamp)
	}
	v := putOrDrop(&next, exists, c.Stamp)
	res := command.Result{Status: command.StatusValue, Value: n, Grew: len(next.Value) > len(old.Value),
		Item: command.Item{Flags: next.Flags, ExpiresAt: next.ExpiresAt, CAS: next.CAS}, PrevExpiresAt: old.ExpiresAt}
	if v == put {
		res.CAS = next.CAS
	}
	return next, v, res
}

// metaGetRule is an mg that changes its item. N creates a missing item,
// empty, and wins its token; T sets a new expiry; R wins the token when
// the item expires before R's time (its expiry before this T), and a stale
// item's token is won by the first reader; a won token is sent (Z to the
// readers after). Unless u (MetaNoBump), the read marks the item fetched
// and accessed at the entry's stamp, a vivified one too, as memcached
// bumps it after linking it.
//
// The result is the item as the reply describes it: fetched and accessed
// as before this read (h and l), stale and token sent as after it, Won
// and HadToken (W and Z), and the value, a copy, only with v
// (MetaWantValue).
func metaGetRule(c *command.Command, old *command.Item, exists, live bool, index uint64) (command.Item, verdict, command.Result) {
	wantValue, bump := c.Meta&command.MetaWantValue != 0, c.Meta&command.MetaNoBump == 0
	if !live {
		if c.Meta&command.MetaVivify == 0 {
			return notStored(command.StatusNotFound)
		}
		next := command.Item{ExpiresAt: createdExpiry(c), CAS: newCAS(c, index), StoredAt: c.Stamp, Value: []byte{}, TokenSent: true}
		res := command.Result{Status: command.StatusHit, Item: next, Created: true, Won: true}
		if !wantValue {
			res.Item.Value = nil
		}
		if bump {
			next.Fetched, next.AccessedAt = true, c.Stamp
		}
		return next, putOrDrop(&next, exists, c.Stamp), res
	}
	next := *old
	next.Value = nil // copied below, only if it is needed
	if c.Meta&command.MetaHasTTL != 0 {
		next.ExpiresAt = command.ExpiryOf(c.Exptime, c.Stamp)
	}
	won := false
	judged := old.ExpiresAt // R judges the expiry as of its place among the flags
	if c.Meta&command.MetaRecacheAfterTTL != 0 {
		judged = next.ExpiresAt
	}
	if c.Meta&command.MetaRecache != 0 && !old.TokenSent && judged != 0 {
		if at := command.ExpiryOf(c.Recache, c.Stamp); at != 0 && judged < at {
			won = true
		}
	}
	if old.Stale && !old.TokenSent {
		won = true
	}
	if won {
		next.TokenSent = true
	}
	res := command.Result{Status: command.StatusHit, Item: next, Won: won, HadToken: old.TokenSent, PrevExpiresAt: old.ExpiresAt}
	if bump {
		next.Fetched, next.AccessedAt = true, c.Stamp
	}
	changed := next.ExpiresAt != old.ExpiresAt || next.TokenSent != old.TokenSent ||
		next.Fetched != old.Fetched || next.AccessedAt != old.AccessedAt
	if changed || wantValue {
		// One copy for both: the store keeps an encoding of its own.
		next.Value = append([]byte(nil), old.Value...)
	}
	if wantValue {
		res.Item.Value = next.Value
	}
	if !changed {
		return command.Item{}, leave, res // nothing to write
	}
	return next, putOrDrop(&next, exists, c.Stamp), res
}

// accessRule says what an OpAccess does to old, stored under a key a node
// read with the CAS and stored stamp it saw: that version, if it is still visible at the
// entry's time, becomes fetched and accessed at the entry's stamp; any
// other is left alone (ok false), as is one already marked so. next's
// Value is old's.
func accessRule(old *command.Item, exists bool, saw command.KeyCAS, h horizons, stampNs int64) (next command.Item, ok bool) {
	if !exists || old.CAS != saw.CAS || old.StoredAt != saw.StoredAt || !visible(old, h, stampNs) {
		return command.Item{}, false
	}
	if old.Fetched && old.AccessedAt == stampNs {
		return command.Item{}, false
	}
	next = *old
	next.Fetched, next.AccessedAt = true, stampNs
	return next, true
}

// createdExpiry is the expiry of an item an mg or ma creates (N): memcached
// applies T and N in the client's order, so with both the later one wins.
func createdExpiry(c *command.Command) int64 {
	if c.Meta&command.MetaHasTTL != 0 && c.Meta&command.MetaVivifyLast == 0 {
		return command.ExpiryOf(c.Exptime, c.Stamp)
	}
	return command.ExpiryOf(c.Vivify, c.Stamp)
}
