//go:build race

package kvdproc

// raceEnabled: a race-enabled test binary builds a race-enabled kvd, so
// end-to-end tests race-check the server under real load too.
const raceEnabled = true
