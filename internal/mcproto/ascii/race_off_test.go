//go:build !race

package ascii

// raceEnabled: see race_on_test.go.
const raceEnabled = false
