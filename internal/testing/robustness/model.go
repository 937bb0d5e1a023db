package robustness

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// Operation kinds, named after the memcache commands.
const (
	OpGet     = "get"
	OpGets    = "gets"
	OpSet     = "set"
	OpAdd     = "add"
	OpReplace = "replace"
	OpDelete  = "delete"
	OpCAS     = "cas"
	OpIncr    = "incr"
	OpDecr    = "decr"
)

// Input is what a client asked for on one key.
type Input struct {
	Op    string `json:"op"`
	Value string `json:"value,omitempty"`
	Token uint64 `json:"token,omitempty"` // cas
	Delta uint64 `json:"delta,omitempty"` // incr, decr
}

// Output is what the client saw. Unknown marks a write whose outcome the
// client could not learn (timeout, SERVER_ERROR, lost connection): it may
// or may not have taken effect. Reads are never Unknown; failed ones are
// dropped from the history.
type Output struct {
	Unknown bool   `json:"unknown,omitempty"`
	Status  string `json:"status,omitempty"` // STORED, NOT_FOUND, …; VALUE or END for reads; the number for incr/decr
	Value   string `json:"value,omitempty"`
	Token   uint64 `json:"token,omitempty"` // gets
}

// state is one key as a memcached would hold it. CAS tokens are raft log
// indexes the model cannot predict, so a new version's token is unknown
// until a gets observes it; tokens only grow, so an observed token must
// exceed every token seen before (MaxToken).
type state struct {
	Exists     bool
	Value      string
	Token      uint64
	TokenKnown bool
	MaxToken   uint64
}

func (s state) newVersion(v string) state {
	return state{Exists: true, Value: v, MaxToken: s.MaxToken}
}

// counters lists the values an incr/decr leaving n may store. memcached
// rewrites a number that got no longer in place, space-padded to the old
// value's length (padding included), unless the old item is in use, when it
// stores the bare number in a new item; kvd always pads. Value holds the
// bytes exactly, so a read must show this padding and no other: a counter
// read back with more spaces, or padded when it did not shrink, is a bug.
func (s state) counters(n uint64) []state {
	bare := strconv.FormatUint(n, 10)
	out := []state{s.newVersion(bare)}
	if pad := len(s.Value) - len(bare); pad > 0 {
		out = append(out, s.newVersion(bare+strings.Repeat(" ", pad)))
	}
	return out
}

// tokenMayBe reports whether the current version's token may be t.
func (s state) tokenMayBe(t uint64) bool {
	if s.TokenKnown {
		return s.Token == t
	}
	return t > s.MaxToken
}

// bindToken returns s with its token now known to be t.
func (s state) bindToken(t uint64) state {
	s.Token, s.TokenKnown = t, true
	s.MaxToken = max(s.MaxToken, t)
	return s
}

// number parses a counter as memcached does: incr/decr may leave the value
// space-padded in place.
func number(v string) (uint64, bool) {
	n, err := strconv.ParseUint(strings.TrimRight(v, " "), 10, 64)
	return n, err == nil
}

func arith(op string, cur, delta uint64) uint64 {
	if op == OpIncr {
		return cur + delta // wraps at 2^64 like memcached
	}
	if delta > cur {
		return 0
	}
	return cur - delta
}

// step returns every state the key can be in after the operation, given
// what the client saw; none means the observation is impossible from s.
func step(s state, in Input, out Output) []state {
	if out.Unknown {
		return append([]state{s}, applyAny(s, in)...)
	}
	switch in.Op {
	case OpGet, OpGets:
		if out.Status == "END" {
			return when(!s.Exists, s)
		}
		if !s.Exists || out.Value != s.Value {
			return nil
		}
		if in.Op == OpGets {
			return when(s.tokenMayBe(out.Token), s.bindToken(out.Token))
		}
		return []state{s}
	case OpSet:
		return when(out.Status == "STORED", s.newVersion(in.Value))
	case OpAdd, OpReplace:
		mayStore := s.Exists == (in.Op == OpReplace)
		switch out.Status {
		case "STORED":
			return when(mayStore, s.newVersion(in.Value))
		case "NOT_STORED":
			return when(!mayStore, s)
		}
	case OpDelete:
		switch out.Status {
		case "DELETED":
			return when(s.Exists, state{MaxToken: s.MaxToken})
		case "NOT_FOUND":
			return when(!s.Exists, s)
		}
	case OpCAS:
		switch out.Status {
		case "STORED":
			if !s.Exists || !s.tokenMayBe(in.Token) {
				return nil
			}
			return []state{s.bindToken(in.Token).newVersion(in.Value)}
		case "EXISTS":
			return when(s.Exists && (!s.TokenKnown || s.Token != in.Token), s)
		case "NOT_FOUND":
			return when(!s.Exists, s)
		}
	case OpIncr, OpDecr:
		if out.Status == "NOT_FOUND" {
			return when(!s.Exists, s)
		}
		cur, ok := number(s.Value)
		if !s.Exists || !ok {
			return nil
		}
		got, ok := number(out.Status)
		want := arith(in.Op, cur, in.Delta)
		if !ok || got != want {
			return nil
		}
		return s.counters(want)
	}
	return nil
}

// applyAny lists the states a write whose reply was lost may have produced,
// besides "it did not happen".
func applyAny(s state, in Input) []state {
	switch in.Op {
	case OpSet:
		return []state{s.newVersion(in.Value)}
	case OpAdd, OpReplace:
		if s.Exists == (in.Op == OpReplace) {
			return []state{s.newVersion(in.Value)}
		}
	case OpDelete:
		if s.Exists {
			return []state{{MaxToken: s.MaxToken}}
		}
	case OpCAS:
		if s.Exists && s.tokenMayBe(in.Token) {
			return []state{s.bindToken(in.Token).newVersion(in.Value)}
		}
	case OpIncr, OpDecr:
		if cur, ok := number(s.Value); s.Exists && ok {
			return s.counters(arith(in.Op, cur, in.Delta))
		}
	}
	return nil
}

func when(ok bool, s state) []state {
	if ok {
		return []state{s}
	}
	return nil
}

// Model is the per-key memcached model, partitioned by key (an operation's
// Metadata is its *Op).
var Model = porcupine.NondeterministicModel{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		idx := map[string]int{}
		var out [][]porcupine.Operation
		for _, o := range h {
			k := o.Metadata.(*Op).Key
			i, ok := idx[k]
			if !ok {
				i = len(out)
				idx[k] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], o)
		}
		return out
	},
	Init: func() []any { return []any{state{}} },
	Step: func(s, in, out any) []any {
		next := step(s.(state), in.(Input), out.(Output))
		res := make([]any, len(next))
		for i, n := range next {
			res[i] = n
		}
		return res
	},
	Equal: func(a, b any) bool { return a.(state) == b.(state) },
	DescribeOperation: func(in, out any) string {
		i, o := in.(Input), out.(Output)
		arg := ""
		switch i.Op {
		case OpSet, OpAdd, OpReplace:
			arg = fmt.Sprintf("(%q)", i.Value)
		case OpCAS:
			arg = fmt.Sprintf("(%q, %d)", i.Value, i.Token)
		case OpIncr, OpDecr:
			arg = fmt.Sprintf("(%d)", i.Delta)
		}
		res := o.Status
		switch {
		case o.Unknown:
			res = "unknown"
		case o.Status == "VALUE" && i.Op == OpGets:
			res = fmt.Sprintf("%q cas %d", o.Value, o.Token)
		case o.Status == "VALUE":
			res = fmt.Sprintf("%q", o.Value)
		}
		return i.Op + arg + " → " + res
	},
	DescribeState: func(s any) string {
		st := s.(state)
		if !st.Exists {
			return "(absent)"
		}
		if st.TokenKnown {
			return fmt.Sprintf("%q cas %d", st.Value, st.Token)
		}
		return fmt.Sprintf("%q cas ?>%d", st.Value, st.MaxToken)
	},
	DescribeOperationMetadata: func(m any) string {
		op := m.(*Op)
		s := fmt.Sprintf("key %s, client %d via %s", op.Key, op.Client, op.Node)
		if op.Err != "" {
			s += ": " + op.Err
		}
		return s
	},
}

// infinity is the return time of an operation whose outcome is unknown:
// porcupine may then place it anywhere after its call.
const infinity = math.MaxInt64
