package robustness

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/kvd-project/kvd/internal/testing/kvdproc"
)

// TestWitnessJoinThroughFollowerAfterAdd is the deterministic form of what
// replace-follower on 2n+1w found (seed 12 of make robustness COUNT=25
// SEED=1, kvd of 41f52ca): the witness n3 is removed, registered again
// with `kvd cluster add --witness n3 ADDR --endpoints <a follower>`, and
// started as that command says, `kvd serve --witness --join <the member
// that answered>`, here the follower. The follower refused the join with
// 409 witness_quorum ("2 data member(s) and 1 witness(es) already"):
// membership.Controller.AddMember counted the witness just registered
// against itself before passing the request on, where the leader would
// have answered that the member is already there. Fixed in 1a8f7c7 (the
// witness being added is left out of the count); this keeps it fixed.
func TestWitnessJoinThroughFollowerAfterAdd(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 2n+1w cluster")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := StartCluster(ctx, kvdproc.Binary(t), t.TempDir(), TwoAndWitness, DefaultTiming, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.WaitClusterVersion(ctx, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	lead, err := cl.Leader(ctx, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	follower := dataOnly(cl.Others(lead))[0]
	w := cl.Witnesses()[0]
	e := &Env{Cluster: cl, Rng: rand.New(rand.NewPCG(1, 2)), Logf: t.Logf}
	if _, err := removeAndWipe(ctx, e, lead, w); err != nil {
		t.Fatal(err)
	}
	if err := addWitness(ctx, e, w, follower); err != nil {
		t.Fatal(err)
	}
	w.args = joinArgs(w.args, "http://"+follower.HTTPAddr, w.ProxyAddr, true)
	if err := w.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := waitVoter(ctx, cl, w); err != nil {
		t.Fatalf("a witness registered through a follower and joining through it: %v", err)
	}
	if fs := checkWitnesses(ctx, cl, t.Logf); len(fs) > 0 {
		t.Errorf("after the join:\n  %s", strings.Join(fs, "\n  "))
	}
}
