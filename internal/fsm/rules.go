package fsm

import "github.com/kvd-project/kvd/internal/command"

// The item rules: what one command does to the item under its key, in
// memcached's terms, as a pure function of the item (or its absence), the
// command, the entry's index and the flush_all horizons. Apply reads the
// item, asks the rule, and writes the verdict into its batch; the rules
// know nothing of Pebble, the item cache or the counters, so they can be
// read, and tested, on their own (rules_test.go).

// verdict is what becomes of the stored item under a command's key.
type verdict uint8

const (
	// leave: the store keeps what it holds under the key (or nothing).
	leave verdict = iota
	// put: the rule's next item replaces what is stored under the key.
	put
	// drop: what is stored under the key is deleted.
	drop
)

var verdictNames = [...]string{"leave", "put", "drop"}

func (v verdict) String() string {
	if int(v) < len(verdictNames) {
		return verdictNames[v]
	}
	return "verdict(?)"
}

// itemRule applies c, the entry at index, to old, the item stored under
// c.Key when exists. old may be stored yet no longer visible at c's stamp
// (expired, or hidden by a flush_all horizon of h): every rule but delete
// (and md) treats it as absent. next is the item to store when the verdict
// is put; its CAS is index (or, for a meta write, the client's E), its
// StoredAt the stamp. Its Value never shares old's storage: it is the
// command's value, or one built anew (append, prepend, incr, decr, touch,
// gat, mg), so a gat's result stays the caller's own. Every item a write
// stores anew has no meta state (Fetched … TokenSent); touch and gat keep
// the item's, as memcached keeps its item flags; the meta rules
// (rules_meta.go) say what they do with it.
//
// Ops that are not about one item (flush_all, expire, access, member,
// cluster version) are not item rules; itemRule answers them StatusInvalid.
func itemRule(c *command.Command, old *command.Item, exists bool, h horizons, index uint64) (next command.Item, v verdict, res command.Result) {
	live := exists && visible(old, h, c.Stamp)
	switch c.Op {
	case command.OpMetaStore:
		return metaStoreRule(c, old, exists, live, index)
	case command.OpMetaDelete:
		return metaDeleteRule(c, old, exists, live, index)
	case command.OpMetaArith:
		return metaArithRule(c, old, exists, live, index)
	case command.OpMetaGet:
		return metaGetRule(c, old, exists, live, index)
	}
	next = command.Item{Flags: c.Flags, ExpiresAt: command.ExpiryOf(c.Exptime, c.Stamp), CAS: index, StoredAt: c.Stamp, Value: c.Value}
	switch c.Op {
	case command.OpSet:
	case command.OpAdd:
		if live {
			return command.Item{}, leave, command.Result{Status: command.StatusNotStored}
		}
	case command.OpReplace:
		if !live {
			return command.Item{}, leave, command.Result{Status: command.StatusNotStored}
		}
	case command.OpCAS:
		if !live {
			return command.Item{}, leave, command.Result{Status: command.StatusNotFound}
		}
		if old.CAS != c.CAS {
			return command.Item{}, leave, command.Result{Status: command.StatusExists}
		}
	case command.OpAppend, command.OpPrepend, command.OpAppendCAS, command.OpPrependCAS:
		if !live {
			return command.Item{}, leave, command.Result{Status: command.StatusNotStored}
		}
		if (c.Op == command.OpAppendCAS || c.Op == command.OpPrependCAS) && old.CAS != c.CAS {
			return command.Item{}, leave, command.Result{Status: command.StatusExists}
		}
		if uint64(len(old.Value))+uint64(len(c.Value)) > uint64(c.MaxSize) {
			return command.Item{}, leave, command.Result{Status: command.StatusTooLarge}
		}
		// append and prepend keep the item's flags and expiry.
		val := make([]byte, 0, len(old.Value)+len(c.Value))
		if c.Op == command.OpAppend || c.Op == command.OpAppendCAS {
			val = append(append(val, old.Value...), c.Value...)
		} else {
			val = append(append(val, c.Value...), old.Value...)
		}
		next.Flags, next.ExpiresAt, next.Value = old.Flags, old.ExpiresAt, val
	case command.OpIncr, command.OpDecr, command.OpArith:
		if !live {
			if c.Op == command.OpArith && c.Create {
				// A counter created at its initial value, as memcached's
				// binary incr stores it: flags 0, the command's expiry, and
				// the initial value answered as it is (no delta applied).
				next.Flags, next.Value = 0, formatCounter(c.Initial, 0)
				v := putOrDrop(&next, exists, c.Stamp)
				res := command.Result{Status: command.StatusValue, Value: c.Initial, Created: true}
				if v == put {
					res.CAS = index
				}
				return next, v, res
			}
			return command.Item{}, leave, command.Result{Status: command.StatusNotFound}
		}
		if len(old.Value) == 0 {
			// memcached refuses an empty value before it compares the CAS.
			return command.Item{}, leave, command.Result{Status: command.StatusNonNumeric}
		}
		if c.Op == command.OpArith && c.CAS != 0 && old.CAS != c.CAS {
			return command.Item{}, leave, command.Result{Status: command.StatusExists}
		}
		n, ok := parseCounter(old.Value)
		if !ok {
			return command.Item{}, leave, command.Result{Status: command.StatusNonNumeric}
		}
		if c.Op == command.OpIncr || c.Op == command.OpArith && !c.Decr {
			n += c.Delta // wraps at 2^64, as memcached does
		} else if c.Delta > n {
			n = 0
		} else {
			n -= c.Delta
		}
		next.Flags, next.ExpiresAt = old.Flags, old.ExpiresAt
		next.Value = formatCounter(n, len(old.Value))
		inPlace(&next, old)
		return next, putOrDrop(&next, exists, c.Stamp), command.Result{Status: command.StatusValue, Value: n, Grew: len(next.Value) > len(old.Value), CAS: index}
	case command.OpTouch, command.OpGAT:
		if !live {
			return command.Item{}, leave, command.Result{Status: command.StatusNotFound}
		}
		next = *old
		next.Value = append([]byte(nil), old.Value...)
		next.ExpiresAt = command.ExpiryOf(c.Exptime, c.Stamp)
		v = putOrDrop(&next, exists, c.Stamp)
		if c.Op == command.OpGAT {
			return next, v, command.Result{Status: command.StatusHit, Item: next}
		}
		// The touched item's flags and CAS, not its value (a pipeline of
		// touches must not hold values): the binary protocol answers them.
		return next, v, command.Result{Status: command.StatusTouched, Item: command.Item{Flags: next.Flags, ExpiresAt: next.ExpiresAt, CAS: next.CAS, StoredAt: next.StoredAt}}
	case command.OpDelete, command.OpDeleteCAS:
		// A stored item no longer visible goes too: nothing would read it.
		v = leave
		if exists {
			v = drop
		}
		if !live {
			return command.Item{}, v, command.Result{Status: command.StatusNotFound}
		}
		if c.Op == command.OpDeleteCAS && old.CAS != c.CAS {
			return command.Item{}, leave, command.Result{Status: command.StatusExists}
		}
		return command.Item{}, v, command.Result{Status: command.StatusDeleted}
	default:
		return command.Item{}, leave, command.Result{Status: command.StatusInvalid}
	}
	res = command.Result{Status: command.StatusStored}
	if visible(&next, horizons{}, c.Stamp) {
		res.CAS = next.CAS
	}
	return next, putOrDrop(&next, exists, c.Stamp), res
}

// putOrDrop is the verdict on storing next: an item stored already expired
// (a negative or past exptime) is invisible from the start, so nothing is
// kept, and what was stored under the key goes.
func putOrDrop(next *command.Item, exists bool, stampNs int64) verdict {
	if next.ExpiresAt != 0 && next.ExpiresAt <= stampNs {
		if exists {
			return drop
		}
		return leave
	}
	return put
}

// expireRule says whether an OpExpire entry deletes old, stored under the
// key the sweeper named with the CAS it saw: only that version, and only
// if it really is gone at the entry's time, so that a set or touch made
// since wins.
func expireRule(old *command.Item, exists bool, sawCAS uint64, h horizons, stampNs int64) bool {
	return exists && old.CAS == sawCAS && !visible(old, h, stampNs)
}

// horizons are the delayed flush_all times an item's visibility depends on
// (Unix ns; 0 = none): at, the last one, which hides what was stored before
// it once it has come, and before, a passed one that a later flush_all
// replaced, which hides what was stored before it for good.
type horizons struct{ at, before int64 }

// visible is the one rule, for reads and for apply: an item is gone from its
// expiry instant on, and once a delayed flush_all horizon has passed, so is
// everything stored before it.
func visible(it *command.Item, h horizons, nowNs int64) bool {
	if it.ExpiresAt != 0 && it.ExpiresAt <= nowNs {
		return false
	}
	if it.StoredAt < h.before {
		return false
	}
	return h.at == 0 || nowNs < h.at || it.StoredAt >= h.at
}

// inPlace keeps old's meta state (read, stale, token, base64 key) in next,
// the counter incr or decr made of it, when the number still fits: memcached
// then rewrites the item in place, and only a number that outgrows it is a
// new item. (Only the meta writes of cluster version 5 set that state, so
// for every item before, this keeps nothing.)
func inPlace(next, old *command.Item) {
	if len(next.Value) > len(old.Value) {
		return
	}
	next.Fetched, next.AccessedAt, next.Stale, next.TokenSent, next.KeyBinary =
		old.Fetched, old.AccessedAt, old.Stale, old.TokenSent, old.KeyBinary
}
