package e2e

import (
	"reflect"

	"github.com/bradfitz/gomemcache/memcache"
)

// casOf reads the CAS token gomemcache keeps unexported in Item (it has no
// accessor; the token round-trips through CompareAndSwap only).
func casOf(it *memcache.Item) uint64 {
	return reflect.ValueOf(it).Elem().FieldByName("CasID").Uint()
}
