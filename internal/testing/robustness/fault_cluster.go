package robustness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// clusterFaults are the faults that exercise snapshots and membership.
func clusterFaults() []Fault {
	return []Fault{
		{Name: "snapshot-follower", Topologies: manyNodes, Args: snapshotArgs, Inject: snapshotFollower},
		{Name: "transfer-leader", Topologies: manyNodes, Inject: transferLeader},
		// Compaction too: see replaceFollower. With a witness, the
		// witness is the follower replaced.
		{Name: "replace-follower", Topologies: manyNodes, Args: snapshotArgs, Inject: replaceFollower},
	}
}

// Compaction settings of snapshot-follower runs: every node compacts its
// log every 50 applied entries and keeps 50, so a follower a few hundred
// entries behind has fallen off every log and can only catch up from a
// snapshot.
const snapshotEvery, snapshotKeep = 50, 50

var snapshotArgs = []string{
	"--snapshot-count", strconv.Itoa(snapshotEvery),
	"--snapshot-catchup-entries", strconv.Itoa(snapshotKeep),
}

// snapshotLag is how far past the absent follower the survivors must have
// applied before it comes back. A node compacts once it has applied
// snapshotEvery+snapshotKeep entries past its last compaction point, to
// snapshotKeep behind what it applied, so its first index trails its
// applied index by at most about every+keep entries; three times that
// leaves room for apply batches.
const snapshotLag = 3 * (snapshotEvery + snapshotKeep)

// maxFillWrites bounds the writes snapshot-follower makes itself, in case
// client traffic alone does not reach snapshotLag (it usually does).
const maxFillWrites = 1000

// fillKeys is how many keys the filler writes round-robin. They are not
// workload keys: porcupine never sees them, but they are in every
// replica's digest, so the snapshot must carry them.
const fillKeys = 8

// Metric names (internal/metrics) that prove a snapshot was shipped.
const (
	metricSnapInstalled = "kvd_raft_snapshots_installed_total"
	metricSnapReceived  = "kvd_raft_snapshots_received_total"
	metricSnapSent      = "kvd_raft_snapshots_sent_total"
)

// snapshotFollower keeps a follower away (SIGKILL or a partition, drawn)
// until the others have compacted their logs past it, brings it back, and
// fails unless it installed a snapshot: without that check the fault could
// quietly degrade into a plain kill.
func snapshotFollower(ctx context.Context, e *Env) (func(context.Context) error, error) {
	lead, err := pick(ctx, e, true)
	if err != nil {
		return nil, err
	}
	others := e.Cluster.Others(lead)
	f := others[e.Rng.IntN(len(others))]
	kill := e.Rng.IntN(2) == 0
	var base float64 // installs so far; a restarted process counts from 0
	if kill {
		e.Logf("SIGKILL follower %s until the log is compacted past it", f.Name)
		f.Kill()
	} else {
		if base, err = e.Cluster.metric(ctx, f, metricSnapInstalled); err != nil {
			return nil, err
		}
		e.Logf("isolate follower %s until the log is compacted past it", f.Name)
		e.Cluster.Net.Isolate(f.ID, e.Cluster.IDs())
	}
	survivors := e.Cluster.Others(f)
	// Nothing committed after this point can reach f before the heal.
	var behind uint64
	for _, n := range survivors {
		st, err := e.Cluster.Status(ctx, n)
		if err == nil {
			behind = max(behind, st.Commit)
		}
	}
	filled := fillPast(ctx, e, survivors, behind+snapshotLag)
	return func(ctx context.Context) error {
		errs := []error{filled(ctx)}
		if kill {
			e.Logf("restart %s", f.Name)
			errs = append(errs, f.Restart())
		} else {
			e.Logf("heal the network")
			e.Cluster.Net.Heal()
		}
		errs = append(errs, waitSnapshot(ctx, e, f, base, survivors))
		return errors.Join(errs...)
	}, nil
}

// fill writes filler keys through the given nodes (the data members among
// them) until each of them (witnesses too) has applied target, or
// maxFillWrites attempts have been made. It returns the writes
// acknowledged.
func fill(ctx context.Context, c *Cluster, nodes []*Node, target uint64) (int, error) {
	n, err := fillUntil(ctx, c, nodes, 0, func() bool { return c.allApplied(ctx, nodes, target) })
	if err != nil {
		return n, fmt.Errorf("apply index %d: %w", target, err)
	}
	return n, nil
}

// fillUntil writes filler keys through the data members among the given
// nodes (a witness refuses them), gap apart, until enough reports true
// (asked every 20 writes, which keeps status polls cheap) or maxFillWrites
// attempts have been made. It returns the writes acknowledged.
func fillUntil(ctx context.Context, c *Cluster, nodes []*Node, gap time.Duration, enough func() bool) (int, error) {
	if nodes = dataOnly(nodes); len(nodes) == 0 {
		return 0, errors.New("no data member to write filler keys through")
	}
	conns := map[*Node]*mcConn{}
	defer func() {
		for _, mc := range conns {
			_ = mc.Close()
		}
	}()
	writes := 0
	for i := 0; ; i++ {
		if i%20 == 0 && enough() {
			return writes, nil
		}
		if i == maxFillWrites {
			return writes, fmt.Errorf("not done after %d filler writes (%d acknowledged)", maxFillWrites, writes)
		}
		if ctx.Err() != nil {
			return writes, ctx.Err()
		}
		n := nodes[i%len(nodes)]
		mc := conns[n]
		if mc == nil {
			var err error
			if mc, err = dialMC(n.MemcacheAddr, c.Timing.RequestTimeout, n.sec); err != nil {
				time.Sleep(50 * time.Millisecond)
				continue
			}
			conns[n] = mc
		}
		if _, err := mc.store(OpSet, fmt.Sprintf("snapfill%d", i%fillKeys), fmt.Sprintf("fill-%d", i), 0); err != nil {
			// The connection's state is unknown after an error.
			_ = mc.Close()
			delete(conns, n)
			time.Sleep(50 * time.Millisecond)
			continue
		}
		writes++
		time.Sleep(gap)
	}
}

// fillPast runs fill in the background until every node in nodes has
// applied target; the returned function waits for it and returns its error.
func fillPast(ctx context.Context, e *Env, nodes []*Node, target uint64) func(context.Context) error {
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var writes int
		writes, err = fill(ctx, e.Cluster, nodes, target)
		e.Logf("survivors applied past %d (%d filler writes)", target, writes)
	}()
	return func(ctx context.Context) error {
		select {
		case <-done:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// allApplied reports whether every node in nodes has applied index.
func (c *Cluster) allApplied(ctx context.Context, nodes []*Node, index uint64) bool {
	for _, n := range nodes {
		st, err := c.Status(ctx, n)
		if err != nil || st.Applied < index {
			return false
		}
	}
	return true
}

// waitSnapshot waits until f has installed more snapshots than base.
func waitSnapshot(ctx context.Context, e *Env, f *Node, base float64, survivors []*Node) error {
	var installed float64
	err := poll(ctx, 30*time.Second, f.Name+" installs a snapshot", func() (bool, error) {
		if !f.Running() {
			return false, fmt.Errorf("%w: %s exited; its log ends:\n%s", errGiveUp, f.Name, logTail(f.LogPath, 15))
		}
		v, err := e.Cluster.metric(ctx, f, metricSnapInstalled)
		installed = v
		return err == nil && v > base, err
	})
	// What the others say they sent, for the log or the error.
	var sent []string
	for _, n := range survivors {
		v, serr := e.Cluster.metric(ctx, n, metricSnapSent)
		if serr != nil {
			v = -1
		}
		sent = append(sent, fmt.Sprintf("%s sent %g", n.Name, v))
	}
	received, _ := e.Cluster.metric(ctx, f, metricSnapReceived)
	summary := fmt.Sprintf("%s: %s %g (before: %g), %s %g; %s", f.Name, metricSnapInstalled, installed, base,
		metricSnapReceived, received, strings.Join(sent, ", "))
	if err != nil {
		return fmt.Errorf("no snapshot reached %s, so the fault was a plain outage: %w [%s]", f.Name, err, summary)
	}
	e.Logf("snapshot installed: %s", summary)
	return nil
}

// metric reads one unlabelled sample from n's /metrics.
func (c *Cluster) metric(ctx context.Context, n *Node, name string) (float64, error) {
	body, err := c.getBody(ctx, "http://"+n.HTTPAddr+"/metrics")
	if err != nil {
		return 0, fmt.Errorf("metrics of %s: %w", n.Name, err)
	}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		v, ok := strings.CutPrefix(sc.Text(), name+" ")
		if !ok {
			continue
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
		if err != nil {
			return 0, fmt.Errorf("metrics of %s: %s: %w", n.Name, name, err)
		}
		return f, nil
	}
	return 0, fmt.Errorf("metrics of %s: no %s", n.Name, name)
}

// admin sends one admin request and returns the status and body.
func (c *Cluster) admin(ctx context.Context, method, u string, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w", method, u, err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.adminHTTP.Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, u, err)
	}
	return resp.StatusCode, b, nil
}

// leaderTerm returns the running node that claims leadership in the
// highest term, and that term.
func (c *Cluster) leaderTerm(ctx context.Context) (*Node, uint64) {
	var lead *Node
	var term uint64
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		st, err := c.Status(ctx, n)
		if err == nil && st.Leader != "" && st.Leader == st.Self && st.Term > term {
			lead, term = n, st.Term
		}
	}
	return lead, term
}

// transferLeader moves leadership one to three times during traffic, each
// time through a random node's admin API (a follower forwards it, a
// witness too), to the most caught-up voter or to a named data member.
// Each move is checked: a node other than the old leader must lead in a
// later term. Heal fails if no move ever happened. With a witness, heal
// also asks for leadership to move to it, through a random node, and fails
// unless that is refused (409) and leadership stays where it was.
func transferLeader(ctx context.Context, e *Env) (func(context.Context) error, error) {
	el := e.Cluster.Timing.ElectionTimeout
	count := 1 + e.Rng.IntN(3)
	gaps := make([]time.Duration, count)
	for i := 1; i < count; i++ {
		gaps[i] = el + time.Duration(e.Rng.Int64N(int64(el)))
	}
	// Drawn here, so that the seed alone fixes them.
	via := make([]*Node, count)
	target := make([]int, count) // -1: the most caught-up voter; else an index into the data followers
	for i := range count {
		via[i] = e.Cluster.Nodes[e.Rng.IntN(len(e.Cluster.Nodes))]
		target[i] = e.Rng.IntN(len(e.Cluster.DataNodes())) - 1
	}
	var refuseVia *Node
	if len(e.Cluster.Witnesses()) > 0 {
		refuseVia = e.Cluster.Nodes[e.Rng.IntN(len(e.Cluster.Nodes))]
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	var moved int
	var lastErr error
	go func() {
		defer close(done)
		for i := range count {
			select {
			case <-stop:
				return
			case <-time.After(gaps[i]):
			}
			if err := transferOnce(ctx, e.Cluster, e.Logf, via[i], target[i]); err != nil {
				e.Logf("transfer %d of %d: %v", i+1, count, err)
				lastErr = err
				continue
			}
			moved++
		}
	}()
	return func(ctx context.Context) error {
		close(stop)
		<-done
		if moved == 0 {
			return fmt.Errorf("leadership never moved in %d attempted transfers: %w", count, lastErr)
		}
		e.Logf("leadership moved %d of %d times", moved, count)
		if refuseVia != nil {
			if err := transferToWitness(ctx, e, refuseVia); err != nil {
				return err
			}
		}
		_, err := e.Cluster.Leader(ctx, 10*time.Second)
		return err
	}, nil
}

// transferToWitness asks via to hand leadership to the witness, which kvd
// must refuse (409, code "witness") without moving leadership.
func transferToWitness(ctx context.Context, e *Env, via *Node) error {
	w := e.Cluster.Witnesses()[0]
	var old *Node
	var oldTerm uint64
	if err := poll(ctx, 10*time.Second, "a leader before the transfer to the witness", func() (bool, error) {
		old, oldTerm = e.Cluster.leaderTerm(ctx)
		return old != nil, nil
	}); err != nil {
		return err
	}
	if err := e.Cluster.wantRefusal(ctx, http.MethodPost, "http://"+via.HTTPAddr+"/v1/cluster/transfer-leader", map[string]string{"to": w.Name},
		"witness", "a transfer to witness "+w.Name+" via "+via.Name); err != nil {
		return err
	}
	// A refused transfer leaves the leader alone. A new election could
	// still happen for another reason, but it must not be the witness's.
	if lead, term := e.Cluster.leaderTerm(ctx); lead == w {
		return fmt.Errorf("witness %s leads (term %d, was %s at %d) after a refused transfer", w.Name, term, old.Name, oldTerm)
	}
	e.Logf("transfer to witness %s via %s refused (HTTP 409)", w.Name, via.Name)
	return nil
}

// transferOnce asks via to move leadership and waits until another node
// leads in a later term. A refused or timed-out request (raft drops a
// transfer to a voter that does not catch up within an election timeout)
// is retried for a few seconds.
func transferOnce(ctx context.Context, c *Cluster, logf func(string, ...any), via *Node, target int) error {
	var old *Node
	var oldTerm uint64
	if err := poll(ctx, 10*time.Second, "a leader before the transfer", func() (bool, error) {
		old, oldTerm = c.leaderTerm(ctx)
		return old != nil, nil
	}); err != nil {
		return err
	}
	to := ""
	if target >= 0 {
		to = dataOnly(c.Others(old))[target].Name
	}
	var answer string
	err := poll(ctx, 5*time.Second, "transfer leadership", func() (bool, error) {
		status, body, err := c.admin(ctx, http.MethodPost, "http://"+via.HTTPAddr+"/v1/cluster/transfer-leader", map[string]string{"to": to})
		if err != nil {
			return false, err
		}
		if status != http.StatusOK {
			return false, fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(body))
		}
		answer = string(bytes.TrimSpace(body))
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("from %s (term %d) to %q via %s: %w", old.Name, oldTerm, to, via.Name, err)
	}
	var lead *Node
	var term uint64
	err = poll(ctx, 5*time.Second, "a new leader", func() (bool, error) {
		lead, term = c.leaderTerm(ctx)
		return lead != nil && lead != old && term > oldTerm, nil
	})
	if err != nil {
		return fmt.Errorf("from %s (term %d) via %s answered %s, but: %w", old.Name, oldTerm, via.Name, answer, err)
	}
	logf("leadership moved from %s (term %d) to %s (term %d), asked %q via %s", old.Name, oldTerm, lead.Name, term, to, via.Name)
	return nil
}

// memberView is the part of /v1/cluster that shows membership.
type memberView struct {
	Ready   bool         `json:"ready"`
	Members []viewMember `json:"members"`
}

// viewMember is one member in a memberView.
type viewMember struct {
	Name    string `json:"name"`
	Kind    string `json:"kind"`
	Self    bool   `json:"self"`
	Witness bool   `json:"witness"`
}

// replaceFollower removes a follower from the cluster during traffic, waits
// for the removed process to stop itself, wipes its data, and at heal
// starts it again as a new member under the same name and addresses (kvd
// serve --join), then waits until it is a voter and ready. The final
// checks read and digest it like any other node.
//
// With a witness, the follower replaced is the witness: first the removal
// of the data follower must be refused (409 witness_quorum: one data
// member and a witness would survive no loss, and a witness alone could
// not elect it). The witness is removed, and comes back as a witness
// (kvd serve --witness --join), drawn per run either registered first
// with `kvd cluster add --witness` through the member it then joins
// through, or adding itself as it joins. It must then be a voter marked
// witness in its own view.
//
// Both ways a new member catches up are drawn per run: the survivors
// compact their logs past the removal first, so the new member is sent a
// snapshot (which must name it, though the member was added after any
// compaction), or not, so it may replay the log including its own earlier
// removal (its raft ID comes from its name), which it must not take for
// its fate. Writes go on while it joins, or not. Each of these once hit a
// kvd bug (docs/robustness.md).
func replaceFollower(ctx context.Context, e *Env) (func(context.Context) error, error) {
	lead, err := pick(ctx, e, true)
	if err != nil {
		return nil, err
	}
	others := e.Cluster.Others(lead)
	f := others[e.Rng.IntN(len(others))]
	if ws := e.Cluster.Witnesses(); len(ws) > 0 {
		f = ws[0]
		if err := removalRefused(ctx, e, lead, dataOnly(others)[0]); err != nil {
			return nil, err
		}
	}
	// The join goes through a random survivor: a follower forwards it.
	survivors := e.Cluster.Others(f)
	via := survivors[e.Rng.IntN(len(survivors))]
	removedAt, err := removeAndWipe(ctx, e, lead, f)
	if err != nil {
		return nil, err
	}
	compact, writeWhileJoining := e.Rng.IntN(2) == 0, e.Rng.IntN(2) == 0
	addFirst := f.Witness && e.Rng.IntN(2) == 0
	filled := func(context.Context) error { return nil }
	if compact {
		filled = fillPast(ctx, e, survivors, removedAt+snapshotLag)
	}
	e.Logf("compact past the removal: %v; writes while %s joins: %v; registered before it starts: %v", compact, f.Name, writeWhileJoining, addFirst)
	return func(ctx context.Context) error {
		if err := filled(ctx); err != nil {
			return err
		}
		if addFirst {
			// Through via, and then the join too, as the command's
			// output says: a follower passes both on (once refused,
			// TestWitnessJoinThroughFollowerAfterAdd).
			if err := addWitness(ctx, e, f, via); err != nil {
				return err
			}
		}
		f.args = joinArgs(f.args, e.Cluster.Sec.baseURL(via.HTTPAddr), f.ProxyAddr, f.Witness)
		e.Logf("start %s again, joining through %s", f.Name, via.Name)
		if err := f.Restart(); err != nil {
			return err
		}
		stop := make(chan struct{})
		writes := make(chan int, 1)
		go func() {
			if !writeWhileJoining {
				writes <- 0
				return
			}
			// About client traffic's write rate on a loaded machine, not flat out.
			n, _ := fillUntil(ctx, e.Cluster, survivors, 5*time.Millisecond, func() bool {
				select {
				case <-stop:
					return true
				default:
					return false
				}
			})
			writes <- n
		}()
		err := waitVoter(ctx, e.Cluster, f)
		close(stop)
		n := <-writes
		if err != nil {
			return err
		}
		installed, _ := e.Cluster.metric(ctx, f, metricSnapInstalled)
		e.Logf("%s is a ready voter again (%s %g; %d filler writes while it joined)", f.Name, metricSnapInstalled, installed, n)
		return nil
	}, nil
}

// removeAndWipe removes follower f through the leader, waits until the
// removed process stops itself, and wipes its data dir. It returns an
// index at or after the removal.
func removeAndWipe(ctx context.Context, e *Env, lead, f *Node) (uint64, error) {
	e.Logf("remove follower %s", f.Name)
	u := "http://" + lead.HTTPAddr + "/v1/cluster/members/" + url.PathEscape(f.Name)
	err := poll(ctx, 10*time.Second, "remove "+f.Name, func() (bool, error) {
		status, body, err := e.Cluster.admin(ctx, http.MethodDelete, u, nil)
		switch {
		case err != nil:
			return false, err
		case status == http.StatusOK:
			return true, nil
		case status == http.StatusNotFound:
			// An earlier attempt that timed out may have been applied.
			return true, nil
		}
		return false, fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(body))
	})
	if err != nil {
		return 0, err
	}
	// The removal is applied on the leader, so its index is at most the
	// survivors' commit index now.
	var removedAt uint64
	for _, n := range e.Cluster.Others(f) {
		if st, err := e.Cluster.Status(ctx, n); err == nil {
			removedAt = max(removedAt, st.Commit)
		}
	}
	// A removed member stops itself once it applies its removal; one that
	// keeps running would be a kvd bug, not something to paper over.
	if err := poll(ctx, 15*time.Second, "removed "+f.Name+" stops", func() (bool, error) {
		return !f.Running(), nil
	}); err != nil {
		f.Kill()
		return 0, fmt.Errorf("%w; its log ends:\n%s", err, logTail(f.LogPath, 15))
	}
	e.Logf("%s stopped after its removal (at or before index %d); wipe %s", f.Name, removedAt, f.DataDir)
	if err := os.RemoveAll(f.DataDir); err != nil {
		return 0, fmt.Errorf("wipe %s: %w", f.Name, err)
	}
	return removedAt, nil
}

// joinArgs turns a founding member's flags into a joiner's: no
// --initial-cluster nor --initial-witnesses, --join through a member,
// --witness for a witness, and the proxy advertised as its peer address so
// that partitions still cut it.
func joinArgs(args []string, join, proxy string, witness bool) []string {
	out := make([]string, 0, len(args)+5)
	for i := 0; i < len(args); i++ {
		if args[i] == "--initial-cluster" || args[i] == "--initial-witnesses" {
			i++ // and its value
			continue
		}
		out = append(out, args[i])
	}
	if witness {
		out = append(out, "--witness")
	}
	return slices.Concat(out, []string{"--join", join, "--advertise-peer-addr", proxy})
}

// removalRefused asks the leader to remove data member d, which would
// leave one data member and a witness, and fails unless kvd refuses (409,
// code witness_quorum) and d is still a voter. A 503 is retried.
func removalRefused(ctx context.Context, e *Env, lead, d *Node) error {
	u := "http://" + lead.HTTPAddr + "/v1/cluster/members/" + url.PathEscape(d.Name)
	if err := e.Cluster.wantRefusal(ctx, http.MethodDelete, u, nil, "witness_quorum", "the removal of data member "+d.Name+" beside a witness"); err != nil {
		return err
	}
	var v memberView
	if err := e.Cluster.getJSON(ctx, "http://"+lead.HTTPAddr+"/v1/cluster", &v); err != nil {
		return err
	}
	if m, ok := v.member(d.Name); !ok || m.Kind != "voter" {
		return fmt.Errorf("%s is no longer a voter (%+v) after its removal was refused", d.Name, m)
	}
	e.Logf("removal of data member %s refused (HTTP 409 witness_quorum)", d.Name)
	return nil
}

// addWitness registers w as a witness with `kvd cluster add --witness`
// through via, before w starts: the way an operator adds one.
func addWitness(ctx context.Context, e *Env, w, via *Node) error {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	endpoint := "http://" + via.HTTPAddr
	if e.Cluster.Sec != nil {
		endpoint = "https://" + via.HTTPAddr
	}
	args := slices.Concat([]string{"cluster", "add", "--witness", w.Name, w.ProxyAddr, "--endpoints", endpoint}, e.Cluster.Sec.cliArgs())
	out, err := exec.CommandContext(ctx, w.bin, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("kvd cluster add --witness %s via %s: %w: %s", w.Name, via.Name, err, bytes.TrimSpace(out))
	}
	e.Logf("kvd cluster add --witness %s via %s: %s", w.Name, via.Name, strings.Join(strings.Fields(string(out)), " "))
	return nil
}

// waitVoter waits until n is ready and a voter in its own view of the
// configuration (a joiner starts as a learner and is promoted by the
// leader once it has caught up), marked witness if and only if n is one.
func waitVoter(ctx context.Context, c *Cluster, n *Node) error {
	kind, witness := "none", false
	err := poll(ctx, 60*time.Second, n.Name+" joins as a voter", func() (bool, error) {
		if !n.Running() {
			return false, fmt.Errorf("%w: %s exited; its log ends:\n%s", errGiveUp, n.Name, logTail(n.LogPath, 15))
		}
		var v memberView
		if err := c.getJSON(ctx, "http://"+n.HTTPAddr+"/v1/cluster", &v); err != nil {
			return false, err
		}
		for _, m := range v.Members {
			if m.Self {
				kind, witness = m.Kind, m.Witness
			}
		}
		if kind == "voter" && witness != n.Witness {
			return false, fmt.Errorf("%w: %s joined as a voter with witness %v, want %v", errGiveUp, n.Name, witness, n.Witness)
		}
		return v.Ready && kind == "voter", nil
	})
	if err != nil {
		return fmt.Errorf("%w (last seen as %s)", err, kind)
	}
	// A member that stops itself just after its promotion (as one that
	// replays its own earlier removal does) must fail here, not race the
	// final checks.
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return ctx.Err()
	}
	var v memberView
	err = c.getJSON(ctx, "http://"+n.HTTPAddr+"/v1/cluster", &v)
	if !n.Running() || err != nil || !v.Ready {
		return fmt.Errorf("%s stopped serving right after joining as a voter (ready %v, %v); its log ends:\n%s",
			n.Name, v.Ready, err, logTail(n.LogPath, 15))
	}
	return nil
}

// wantRefusal sends an admin request that must be refused with 409 and
// code. A 503 (no leader for the moment, a timeout) is retried; any other
// answer is the verdict.
func (c *Cluster) wantRefusal(ctx context.Context, method, u string, req any, code, what string) error {
	var status int
	var body []byte
	err := poll(ctx, 5*time.Second, "an answer to "+what, func() (bool, error) {
		var err error
		status, body, err = c.admin(ctx, method, u, req)
		if err == nil && status == http.StatusServiceUnavailable {
			err = fmt.Errorf("HTTP %d: %s", status, bytes.TrimSpace(body))
		}
		return err == nil, err
	})
	if err != nil {
		return err
	}
	var answer struct {
		Code string `json:"code"`
	}
	_ = json.Unmarshal(body, &answer)
	if status != http.StatusConflict || answer.Code != code {
		return fmt.Errorf("%s: HTTP %d %s, want 409 with code %s", what, status, bytes.TrimSpace(body), code)
	}
	return nil
}
