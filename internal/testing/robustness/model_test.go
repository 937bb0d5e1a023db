package robustness

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// hist builds a history from (call, return, key, input, output) rows; a
// negative return means the outcome is unknown.
type row struct {
	client    int
	call, ret int64
	in        Input
	out       Output
}

func ops(key string, rows ...row) []*Op {
	var out []*Op
	for _, r := range rows {
		o := &Op{Client: r.client, Key: key, Input: r.in, Output: r.out, Call: r.call, Return: r.ret}
		if r.ret < 0 {
			o.Return, o.Output = infinity, Output{Unknown: true}
		}
		out = append(out, o)
	}
	return out
}

func TestModel(t *testing.T) {
	set := func(v string) Input { return Input{Op: OpSet, Value: v} }
	stored := Output{Status: "STORED"}
	val := func(v string) Output { return Output{Status: "VALUE", Value: v} }
	tests := []struct {
		name string
		h    []*Op
		want porcupine.CheckResult
	}{
		{"read after write", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{1, 20, 30, Input{Op: OpGet}, val("a")}), porcupine.Ok},
		{"stale read", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 19, set("b"), stored},
			row{1, 20, 30, Input{Op: OpGet}, val("a")}), porcupine.Illegal},
		{"lost acknowledged write", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{1, 20, 30, Input{Op: OpGet}, Output{Status: "END"}}), porcupine.Illegal},
		{"unknown write may have happened", ops("k",
			row{0, 0, -1, set("a"), Output{}},
			row{1, 20, 30, Input{Op: OpGet}, val("a")}), porcupine.Ok},
		{"unknown write may not have happened", ops("k",
			row{0, 0, -1, set("a"), Output{}},
			row{1, 20, 30, Input{Op: OpGet}, Output{Status: "END"}}), porcupine.Ok},
		{"value from nowhere", ops("k",
			row{1, 20, 30, Input{Op: OpGet}, val("z")}), porcupine.Illegal},
		{"cas with the observed token", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, Output{Status: "VALUE", Value: "a", Token: 7}},
			row{0, 13, 14, Input{Op: OpCAS, Value: "b", Token: 7}, stored},
			row{0, 15, 16, Input{Op: OpGets}, Output{Status: "VALUE", Value: "b", Token: 9}}), porcupine.Ok},
		{"cas succeeds on a token already replaced", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, Output{Status: "VALUE", Value: "a", Token: 7}},
			row{0, 13, 14, set("b"), stored},
			row{0, 15, 16, Input{Op: OpCAS, Value: "c", Token: 7}, stored}), porcupine.Illegal},
		{"token goes backwards", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, Output{Status: "VALUE", Value: "a", Token: 7}},
			row{0, 13, 14, set("b"), stored},
			row{0, 15, 16, Input{Op: OpGets}, Output{Status: "VALUE", Value: "b", Token: 5}}), porcupine.Illegal},
		{"add on an existing key", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpAdd, Value: "b"}, stored}), porcupine.Illegal},
		{"replace on a missing key", ops("k",
			row{0, 0, 10, Input{Op: OpReplace, Value: "b"}, Output{Status: "NOT_STORED"}},
			row{0, 11, 12, Input{Op: OpAdd, Value: "c"}, stored}), porcupine.Ok},
		{"counter", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpIncr, Delta: 5}, Output{Status: "105"}},
			row{0, 13, 14, Input{Op: OpDecr, Delta: 200}, Output{Status: "0"}},
			row{0, 15, 16, Input{Op: OpGet}, val("0  ")}), porcupine.Ok},
		{"counter applied twice", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpIncr, Delta: 5}, Output{Status: "105"}},
			row{0, 13, 14, Input{Op: OpIncr, Delta: 5}, Output{Status: "115"}}), porcupine.Illegal},
		{"unknown incr", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, -1, Input{Op: OpIncr, Delta: 5}, Output{}},
			row{1, 13, 14, Input{Op: OpIncr, Delta: 5}, Output{Status: "110"}}), porcupine.Ok},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := porcupine.CheckOperationsTimeout(Model.ToModel(), porcupineOps(tc.h), 10*time.Second)
			if got != tc.want {
				t.Fatalf("got %s, want %s", got, tc.want)
			}
		})
	}
}

func TestCheckClassifiesLostWrites(t *testing.T) {
	const final = 9
	h := append(ops("a",
		row{0, 0, 10, Input{Op: OpSet, Value: "x"}, Output{Status: "STORED"}},
		row{final, 20, 30, Input{Op: OpGets}, Output{Status: "END"}}),
		ops("b",
			row{0, 0, 10, Input{Op: OpSet, Value: "x"}, Output{Status: "STORED"}},
			row{0, 11, 12, Input{Op: OpSet, Value: "y"}, Output{Status: "STORED"}},
			row{1, 13, 14, Input{Op: OpGet}, Output{Status: "VALUE", Value: "x"}})...)
	v := checkLinearizable(h, final, 10*time.Second)
	if v.Result != porcupine.Illegal || len(v.LostKeys) != 1 || v.LostKeys[0] != "a" || len(v.IllegalKeys) != 1 || v.IllegalKeys[0] != "b" {
		t.Fatalf("got %+v", v)
	}
}

// TestTrafficVacuity: a run whose clients never got a definite write or a
// read through checks nothing, however linearizable its history; the final
// client's own operations do not count.
func TestTrafficVacuity(t *testing.T) {
	const final = 9
	set := Input{Op: OpSet, Value: "x"}
	tests := []struct {
		name string
		h    []*Op
		want int // problems reported
	}{
		{"empty", nil, 2},
		{"only the final client", ops("k",
			row{final, 0, 10, set, Output{Status: "STORED"}},
			row{final, 11, 12, Input{Op: OpGets}, Output{Status: "VALUE", Value: "x", Token: 3}}), 2},
		{"only unknown writes", ops("k",
			row{0, 0, -1, set, Output{}},
			row{1, 1, 2, Input{Op: OpGet}, Output{Status: "END"}}), 1},
		{"no reads", ops("k",
			row{0, 0, 10, set, Output{Status: "STORED"}}), 1},
		{"a failed add counts as a definite write", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "x"}, Output{Status: "NOT_STORED"}},
			row{1, 1, 2, Input{Op: OpGet}, Output{Status: "END"}}), 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := trafficVacuity(tc.h, final); len(got) != tc.want {
				t.Fatalf("got %q, want %d problems", got, tc.want)
			}
		})
	}
}
