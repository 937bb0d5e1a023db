package ascii

import "github.com/kvd-project/kvd/internal/mcproto"

// parseMeta reads a meta command (mg, ms, md, ma, mn, me): two-letter words
// starting with 'm', which share the connection and the line reader with
// the text protocol. kvd does not implement them yet, so each answers
// ERROR, as memcached answers a command it does not know.
func (r *Reader) parseMeta(_ [][]byte, _ *mcproto.Request) error {
	return errUnknown()
}
