package transport

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFailureKeyOfRepeatedRefusals: a peer that keeps refusing for the same
// reason is one failure streak, logged at warn once; a "not a member"
// refusal names the acceptor's applied index, which moves between attempts
// and used to make every redial a new warning.
func TestFailureKeyOfRepeatedRefusals(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("handshake: %w", err) }
	for _, tc := range []struct {
		name     string
		a, b     error
		sameKind bool
	}{
		{"not a member, as of two applied indexes",
			&refusedError{status: statusNotMember, id: 2, applied: 100}, wrap(&refusedError{status: statusNotMember, id: 2, applied: 180}), true},
		{"cluster ID mismatch twice",
			&refusedError{status: statusClusterID, clusterID: 9, id: 2}, &refusedError{status: statusClusterID, clusterID: 9, id: 2}, true},
		{"not a member, then a cluster ID mismatch",
			&refusedError{status: statusNotMember, id: 2, applied: 100}, &refusedError{status: statusClusterID, clusterID: 9, id: 2}, false},
		{"not a member, from two nodes",
			&refusedError{status: statusNotMember, id: 2, applied: 100}, &refusedError{status: statusNotMember, id: 3, applied: 100}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.sameKind, failureKey(tc.a) == failureKey(tc.b), "%q vs %q", failureKey(tc.a), failureKey(tc.b))
		})
	}
}
