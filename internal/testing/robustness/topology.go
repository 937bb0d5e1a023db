package robustness

import (
	"fmt"
	"strconv"
	"strings"
)

// Topology is the shape of a run's cluster: Data data members (n1…) and
// then Witnesses witnesses, named after them (n3 in 2n+1w). A witness is a
// raft voter that holds no data and never leads (internal/replica/witness.go): the
// harness sends it no data request, reads no key from it and leaves it out
// of the digest comparison, but waits for it to be ready, may fault it like
// any member, and checks that it never leads and holds no item.
type Topology struct {
	Data      int
	Witnesses int
}

// The topologies a run can have.
var (
	// OneNode is a single data member: no peers, no proxies.
	OneNode = Topology{Data: 1}
	// ThreeNodes is three data members.
	ThreeNodes = Topology{Data: 3}
	// TwoAndWitness is two data members and a witness, n3: the smallest
	// cluster with a witness, which survives the loss of any one member.
	TwoAndWitness = Topology{Data: 2, Witnesses: 1}
)

// Size is the number of members.
func (t Topology) Size() int { return t.Data + t.Witnesses }

// String is "1n", "3n" or "2n+1w".
func (t Topology) String() string {
	if t.Witnesses == 0 {
		return fmt.Sprintf("%dn", t.Data)
	}
	return fmt.Sprintf("%dn+%dw", t.Data, t.Witnesses)
}

// Names are the names of every member, n1…
func (t Topology) Names() []string {
	out := make([]string, t.Size())
	for i := range out {
		out[i] = fmt.Sprintf("n%d", i+1)
	}
	return out
}

// WitnessNames are the names of the witnesses: the members after the data
// members.
func (t Topology) WitnessNames() []string {
	var out []string
	for i := t.Data + 1; i <= t.Size(); i++ {
		out = append(out, fmt.Sprintf("n%d", i))
	}
	return out
}

// ParseTopology reads "1n", "3n", "2n+1w" (the String form), a bare size
// ("1", "3": data members only) or "witness" (2n+1w).
func ParseTopology(s string) (Topology, error) {
	s = strings.TrimSpace(s)
	if s == "witness" {
		return TwoAndWitness, nil
	}
	data, wit, hasWit := strings.Cut(s, "+")
	var t Topology
	var err error
	if t.Data, err = strconv.Atoi(strings.TrimSuffix(data, "n")); err != nil || t.Data < 1 {
		return Topology{}, fmt.Errorf("topology %q: want 1n, 3n, 2n+1w or witness", s)
	}
	if hasWit {
		if t.Witnesses, err = strconv.Atoi(strings.TrimSuffix(wit, "w")); err != nil || t.Witnesses < 1 {
			return Topology{}, fmt.Errorf("topology %q: want 1n, 3n, 2n+1w or witness", s)
		}
	}
	for _, known := range []Topology{OneNode, ThreeNodes, TwoAndWitness} {
		if t == known {
			return t, nil
		}
	}
	return Topology{}, fmt.Errorf("topology %s: the harness runs 1n, 3n and 2n+1w", t)
}
