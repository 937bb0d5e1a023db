//go:build race

package ascii

// raceEnabled: built with -race, whose instrumentation changes what
// escapes to the heap, so allocation counts are not the program's.
const raceEnabled = true
