//go:build !failpoints || !unix

package failpoint

import "time"

// Enabled reports whether this binary was built with failpoints.
const Enabled = false

// Hit marks a failpoint. Without the failpoints build tag it does nothing
// and the compiler inlines it away.
func Hit(string) {}

// Now is the wall clock. Without the failpoints build tag it is time.Now.
func Now() time.Time { return time.Now() }
