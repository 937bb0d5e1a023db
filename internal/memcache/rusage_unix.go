//go:build unix

package memcache

import (
	"fmt"
	"syscall"
)

// appendRusage adds memcached's rusage_user and rusage_system: this
// process's CPU seconds, with microseconds, as monitoring tools read them.
func appendRusage(stat func(name, value string)) {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return
	}
	tv := func(t syscall.Timeval) string { return fmt.Sprintf("%d.%06d", t.Sec, t.Usec) }
	stat("rusage_user", tv(ru.Utime))
	stat("rusage_system", tv(ru.Stime))
}
