//go:build !race

package kvdproc

const raceEnabled = false
