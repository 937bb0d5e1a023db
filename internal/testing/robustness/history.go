package robustness

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
)

// Op is one recorded operation. Times are nanoseconds since the run's
// start; Return is infinity when the outcome is unknown.
type Op struct {
	Client int    `json:"client"`
	Node   string `json:"node"`
	Key    string `json:"key"`
	Input  Input  `json:"input"`
	Output Output `json:"output"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	Err    string `json:"err,omitempty"`
}

// History collects operations from every client goroutine.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []*Op
	// failedReads counts reads dropped because they failed.
	failedReads int
	// notSent counts operations that failed before their request was sent.
	notSent int
	// protocol counts replies no memcached would send (errProtocol), and
	// protocolErrs keeps the first few for the report.
	protocol     int
	protocolErrs []string
	// attempts is every operation tried, kept or dropped, for the
	// vacuity check (vacuity.go).
	attempts []Attempt
}

// Attempt is one operation a client tried, whatever became of it: OK is a
// definite reply (what the model checks); otherwise it failed, was not sent
// or has an unknown outcome. Return is when the client stopped waiting.
type Attempt struct {
	Client int    `json:"client"`
	Node   string `json:"node"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`
	OK     bool   `json:"ok"`
}

func newHistory() *History { return &History{start: time.Now()} }

// now is the monotonic time since the run's start.
func (h *History) now() int64 { return int64(time.Since(h.start)) }

// record adds a finished operation. A failed read is dropped: it observed
// nothing. A failed write is kept with an unknown outcome.
func (h *History) record(op *Op, err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.attempts = append(h.attempts, Attempt{Client: op.Client, Node: op.Node, Call: op.Call, Return: op.Return, OK: err == nil})
	if errors.Is(err, errNotSent) {
		h.notSent++
		return
	}
	if errors.Is(err, errProtocol) {
		h.protocol++
		if len(h.protocolErrs) < 5 {
			h.protocolErrs = append(h.protocolErrs, fmt.Sprintf("%s %s via %s: %v", op.Input.Op, op.Key, op.Node, err))
		}
	}
	if err != nil {
		if op.Input.Op == OpGet || op.Input.Op == OpGets {
			h.failedReads++
			return
		}
		op.Err = err.Error()
		op.Output = Output{Unknown: true}
		op.Return = infinity
	}
	h.ops = append(h.ops, op)
}

// ProtocolErrors returns the first few malformed replies.
func (h *History) ProtocolErrors() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.protocolErrs...)
}

// Attempts returns a copy of every attempted operation.
func (h *History) Attempts() []Attempt {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Attempt(nil), h.attempts...)
}

// okSince counts definite replies to clients other than skip to operations
// called at or after t.
func (h *History) okSince(t int64, skip int) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, a := range h.attempts {
		if a.OK && a.Call >= t && a.Client != skip {
			n++
		}
	}
	return n
}

// Ops returns a copy of the recorded operations.
func (h *History) Ops() []*Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*Op(nil), h.ops...)
}

// Stats summarises a history.
type Stats struct {
	Ops, Reads, Writes, Unknown, FailedReads, NotSent int
	// Protocol counts malformed replies (each also a failed read or an
	// unknown write); any fails the run.
	Protocol int
}

func (h *History) Stats() Stats {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Stats{Ops: len(h.ops), FailedReads: h.failedReads, NotSent: h.notSent, Protocol: h.protocol}
	for _, o := range h.ops {
		switch {
		case o.Output.Unknown:
			s.Unknown++
			s.Writes++
		case o.Input.Op == OpGet || o.Input.Op == OpGets:
			s.Reads++
		default:
			s.Writes++
		}
	}
	return s
}

// porcupineOps converts the history. Each client's operations get a lane
// (ClientId) of their own; after an unknown outcome the client continues in
// a new lane, since that operation never ends.
func porcupineOps(ops []*Op) []porcupine.Operation {
	lanes := map[int]int{}
	next := 0
	out := make([]porcupine.Operation, 0, len(ops))
	for _, o := range ops {
		lane, ok := lanes[o.Client]
		if !ok {
			lane = next
			next++
			lanes[o.Client] = lane
		}
		out = append(out, porcupine.Operation{ClientId: lane, Input: o.Input, Call: o.Call, Output: o.Output, Return: o.Return, Metadata: o})
		if o.Output.Unknown {
			delete(lanes, o.Client)
		}
	}
	return out
}

// writeJSON saves v, indented, to path.
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// trafficVacuity lists what the traffic phase (every client but
// finalClient) lacked for the checks to mean anything: with no definite
// write or no read, a history is linearizable whatever the cluster did, so
// a harness that reached no node (a wrong address, every dial refused)
// would pass.
func trafficVacuity(ops []*Op, finalClient int) []string {
	var writes, reads int
	for _, o := range ops {
		switch {
		case o.Client == finalClient || o.Output.Unknown:
		case o.Input.Op == OpGet || o.Input.Op == OpGets:
			reads++
		default:
			writes++
		}
	}
	var out []string
	if writes == 0 {
		out = append(out, "no write got a definite reply during traffic")
	}
	if reads == 0 {
		out = append(out, "no read succeeded during traffic")
	}
	return out
}
