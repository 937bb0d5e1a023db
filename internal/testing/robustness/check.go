package robustness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// WaitApplied waits until every node reports the same applied index (and
// that index is at least every node's commit index), which, with no client
// traffic left, means they have applied the same log prefix.
func (c *Cluster) WaitApplied(ctx context.Context, within time.Duration) (uint64, error) {
	var idx uint64
	var seen string
	err := poll(ctx, within, "equal applied indexes", func() (bool, error) {
		var parts []string
		var applied []uint64
		var maxCommit uint64
		for _, n := range c.Nodes {
			st, err := c.Status(ctx, n)
			if err != nil {
				return false, err
			}
			parts = append(parts, fmt.Sprintf("%s applied %d commit %d", n.Name, st.Applied, st.Commit))
			applied = append(applied, st.Applied)
			maxCommit = max(maxCommit, st.Commit)
		}
		seen = strings.Join(parts, ", ")
		for _, a := range applied {
			if a != applied[0] || a < maxCommit {
				return false, nil
			}
		}
		idx = applied[0]
		return true, nil
	})
	if err != nil {
		return 0, fmt.Errorf("%w [%s]", err, seen)
	}
	return idx, nil
}

// Replica is one node's local view of every key: "key flags cas expires
// value" per line, in key order.
type Replica struct {
	Node   string
	Lines  []string
	Digest string
}

type listing struct {
	Items []struct {
		Key     string `json:"key"`
		Flags   uint32 `json:"flags"`
		CAS     uint64 `json:"cas"`
		Expires int64  `json:"expires"`
	} `json:"items"`
	Truncated bool `json:"truncated"`
}

// LocalState reads every key on n with consistency=local, values included.
func (c *Cluster) LocalState(ctx context.Context, n *Node) (Replica, error) {
	r := Replica{Node: n.Name}
	var l listing
	u := "http://" + n.HTTPAddr + "/v1/kv?prefix=&limit=1000&consistency=local"
	if err := c.getJSON(ctx, u, &l); err != nil {
		return r, err
	}
	if l.Truncated {
		return r, fmt.Errorf("%s: more than 1000 keys; the workload writes a handful", n.Name)
	}
	for _, it := range l.Items {
		v, err := c.getBody(ctx, "http://"+n.HTTPAddr+"/v1/kv/"+url.PathEscape(it.Key)+"?consistency=local")
		if err != nil {
			return r, err
		}
		r.Lines = append(r.Lines, fmt.Sprintf("%s %d %d %d %q", it.Key, it.Flags, it.CAS, it.Expires, v))
	}
	sort.Strings(r.Lines)
	sum := sha256.Sum256([]byte(strings.Join(r.Lines, "\n")))
	r.Digest = hex.EncodeToString(sum[:8])
	return r, nil
}

func (c *Cluster) getJSON(ctx context.Context, u string, v any) error {
	b, err := c.getBody(ctx, u)
	if err != nil {
		return err
	}
	if err := json.Unmarshal([]byte(b), v); err != nil {
		return fmt.Errorf("decode %s: %w", u, err)
	}
	return nil
}

func (c *Cluster) getBody(ctx context.Context, u string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", fmt.Errorf("GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: HTTP %d: %s", u, resp.StatusCode, b)
	}
	return string(b), nil
}

// Verdict is the outcome of the linearizability check, decided key by key.
type Verdict struct {
	// Result is Illegal if any key is, else Unknown if any key is
	// undecided, else Ok: never Ok unless every key was decided.
	Result porcupine.CheckResult
	// IllegalKeys are keys whose history is not linearizable while traffic
	// ran (a violation: stale read, a write seen then unseen, …).
	IllegalKeys []string
	// LostKeys are keys whose traffic-phase history is linearizable but
	// whose state after healing is not explained by it: an acknowledged
	// write is missing, or a write appeared from nowhere.
	LostKeys []string
	// Undecided are keys porcupine could not decide within the timeout
	// (their whole history, or the recheck without the final reads).
	Undecided []UndecidedKey
}

// UndecidedKey is a key whose check timed out, and the size of what was
// to be checked.
type UndecidedKey struct {
	Key string `json:"key"`
	// Ops and Unknown count the key's operations and, of those, writes
	// of unknown outcome (what makes a history expensive to check).
	Ops     int `json:"ops"`
	Unknown int `json:"unknown"`
	// Stage is "history" (the key's whole history) or "traffic" (the
	// recheck without the final reads of an illegal key).
	Stage string `json:"stage"`
}

func (u UndecidedKey) String() string {
	return fmt.Sprintf("%s (%s: %d ops, %d unknown)", u.Key, u.Stage, u.Ops, u.Unknown)
}

// checkLinearizable checks the history key by key, each key with its own
// porcupine timeout (keys in parallel), and classifies illegal keys by
// rechecking them without the final reads. A key porcupine cannot decide
// in time is undecided, which Result reports as Unknown.
func checkLinearizable(ops []*Op, finalClient int, timeout time.Duration) Verdict {
	byKey := map[string][]*Op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	keys := slices.Sorted(maps.Keys(byKey))
	type keyVerdict struct {
		illegal, lost bool
		undecided     *UndecidedKey
	}
	verdicts := make([]keyVerdict, len(keys))
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			verdicts[i] = func() keyVerdict {
				res := checkKey(byKey[k], timeout)
				if res == porcupine.Unknown {
					return keyVerdict{undecided: undecided(k, "history", byKey[k])}
				}
				if res == porcupine.Ok {
					return keyVerdict{}
				}
				var traffic []*Op
				for _, o := range byKey[k] {
					if o.Client != finalClient {
						traffic = append(traffic, o)
					}
				}
				switch checkKey(traffic, timeout) {
				case porcupine.Illegal:
					return keyVerdict{illegal: true}
				case porcupine.Unknown:
					return keyVerdict{undecided: undecided(k, "traffic", traffic)}
				}
				return keyVerdict{lost: true}
			}()
		}()
	}
	wg.Wait()
	v := Verdict{Result: porcupine.Ok}
	for i, kv := range verdicts {
		switch {
		case kv.illegal:
			v.IllegalKeys = append(v.IllegalKeys, keys[i])
		case kv.lost:
			v.LostKeys = append(v.LostKeys, keys[i])
		case kv.undecided != nil:
			v.Undecided = append(v.Undecided, *kv.undecided)
		}
	}
	switch {
	case len(v.IllegalKeys)+len(v.LostKeys) > 0:
		v.Result = porcupine.Illegal
	case len(v.Undecided) > 0:
		v.Result = porcupine.Unknown
	}
	return v
}

// checkKey checks one key's operations (one partition of Model).
func checkKey(ops []*Op, timeout time.Duration) porcupine.CheckResult {
	return porcupine.CheckOperationsTimeout(Model.ToModel(), porcupineOps(ops), timeout)
}

func undecided(key, stage string, ops []*Op) *UndecidedKey {
	u := &UndecidedKey{Key: key, Stage: stage, Ops: len(ops)}
	for _, o := range ops {
		if o.Output.Unknown {
			u.Unknown++
		}
	}
	return u
}

// decidedOps returns the operations of every key the verdict decided: what
// porcupine's visualisation can be drawn from without timing out again.
func decidedOps(ops []*Op, v Verdict) []*Op {
	skip := map[string]bool{}
	for _, u := range v.Undecided {
		skip[u.Key] = true
	}
	var out []*Op
	for _, o := range ops {
		if !skip[o.Key] {
			out = append(out, o)
		}
	}
	return out
}
