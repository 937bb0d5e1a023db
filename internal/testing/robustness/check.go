package robustness

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
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

// Verdict is the outcome of the linearizability check.
type Verdict struct {
	Result porcupine.CheckResult
	// IllegalKeys are keys whose history is not linearizable while traffic
	// ran (a violation: stale read, a write seen then unseen, …).
	IllegalKeys []string
	// LostKeys are keys whose traffic-phase history is linearizable but
	// whose state after healing is not explained by it: an acknowledged
	// write is missing, or a write appeared from nowhere.
	LostKeys []string
	info     porcupine.LinearizationInfo
}

// checkLinearizable checks the whole history, key by key, and classifies
// illegal keys by rechecking them without the final reads.
func checkLinearizable(ops []*Op, finalClient int, timeout time.Duration) Verdict {
	m := Model.ToModel()
	res, info := porcupine.CheckOperationsVerbose(m, porcupineOps(ops), timeout)
	v := Verdict{Result: res, info: info}
	if res != porcupine.Illegal {
		return v
	}
	byKey := map[string][]*Op{}
	for _, o := range ops {
		byKey[o.Key] = append(byKey[o.Key], o)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if porcupine.CheckOperationsTimeout(m, porcupineOps(byKey[k]), timeout) != porcupine.Illegal {
			continue
		}
		var traffic []*Op
		for _, o := range byKey[k] {
			if o.Client != finalClient {
				traffic = append(traffic, o)
			}
		}
		if porcupine.CheckOperationsTimeout(m, porcupineOps(traffic), timeout) == porcupine.Illegal {
			v.IllegalKeys = append(v.IllegalKeys, k)
		} else {
			v.LostKeys = append(v.LostKeys, k)
		}
	}
	return v
}
