//go:build unix

package mcserver

import (
	"fmt"
	"syscall"

	"github.com/kvd-project/kvd/internal/mcproto"
)

// appendRusage adds memcached's rusage_user and rusage_system: this
// process's CPU seconds, with microseconds, as monitoring tools read them.
func appendRusage(buf []byte) []byte {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return buf
	}
	tv := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	buf = mcproto.AppendStat(buf, "rusage_user", tv(ru.Utime))
	return mcproto.AppendStat(buf, "rusage_system", tv(ru.Stime))
}
