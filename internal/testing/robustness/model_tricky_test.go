package robustness

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestModelTricky: histories a checker could get wrong; each Illegal one
// must be rejected, each Ok one accepted.
func TestModelTricky(t *testing.T) {
	set := func(v string) Input { return Input{Op: OpSet, Value: v} }
	stored := Output{Status: "STORED"}
	val := func(v string) Output { return Output{Status: "VALUE", Value: v} }
	gets := func(v string, tok uint64) Output { return Output{Status: "VALUE", Value: v, Token: tok} }
	get := Input{Op: OpGet}
	end := Output{Status: "END"}
	tests := []struct {
		name string
		h    []*Op
		want porcupine.CheckResult
	}{
		{"unknown write seen then unseen", ops("k",
			row{0, 0, -1, set("a"), Output{}},
			row{1, 10, 20, get, val("a")},
			row{1, 30, 40, get, end}), porcupine.Illegal},
		{"two reads disagree on order", ops("k",
			row{0, 0, 100, set("a"), stored},
			row{1, 0, 100, set("b"), stored},
			row{2, 110, 120, get, val("a")},
			row{3, 130, 140, get, val("b")}), porcupine.Illegal},
		{"concurrent read old or new", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 20, 100, set("b"), stored},
			row{1, 30, 40, get, val("a")},
			row{2, 50, 60, get, val("b")},
			row{3, 70, 80, get, val("b")}), porcupine.Ok},
		{"new-old inversion", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 20, 100, set("b"), stored},
			row{1, 30, 40, get, val("b")},
			row{2, 50, 60, get, val("a")}), porcupine.Illegal},
		{"cas exists on known token", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, gets("a", 7)},
			row{0, 13, 14, Input{Op: OpCAS, Value: "b", Token: 7}, Output{Status: "EXISTS"}}), porcupine.Illegal},
		{"cas not_found on existing", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 13, 14, Input{Op: OpCAS, Value: "b", Token: 7}, Output{Status: "NOT_FOUND"}}), porcupine.Illegal},
		{"two cas stored same token", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, gets("a", 7)},
			row{0, 13, 20, Input{Op: OpCAS, Value: "b", Token: 7}, stored},
			row{1, 13, 20, Input{Op: OpCAS, Value: "c", Token: 7}, stored}), porcupine.Illegal},
		{"unknown cas then gets new", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, gets("a", 7)},
			row{0, 13, -1, Input{Op: OpCAS, Value: "b", Token: 7}, Output{}},
			row{1, 20, 30, Input{Op: OpGets}, gets("b", 9)},
			row{1, 31, 32, Input{Op: OpCAS, Value: "c", Token: 9}, stored},
			row{1, 33, 34, get, val("c")}), porcupine.Ok},
		{"gets same token new version", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpGets}, gets("a", 7)},
			row{0, 13, 14, set("b"), stored},
			row{0, 15, 16, Input{Op: OpGets}, gets("b", 7)}), porcupine.Illegal},
		{"deleted key read", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpDelete}, Output{Status: "DELETED"}},
			row{1, 13, 14, get, val("a")}), porcupine.Illegal},
		{"delete not_found on existing", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, 12, Input{Op: OpDelete}, Output{Status: "NOT_FOUND"}}), porcupine.Illegal},
		{"incr on missing says number", ops("k",
			row{0, 11, 12, Input{Op: OpIncr, Delta: 1}, Output{Status: "1"}}), porcupine.Illegal},
		{"incr wrong result", ops("k",
			row{0, 0, 10, set("5"), stored},
			row{0, 11, 12, Input{Op: OpIncr, Delta: 1}, Output{Status: "7"}}), porcupine.Illegal},
		{"decr then read old", ops("k",
			row{0, 0, 10, set("5"), stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 1}, Output{Status: "4"}},
			row{1, 13, 14, get, val("5")}), porcupine.Illegal},
		{"incr wraps", ops("k",
			row{0, 0, 10, set("18446744073709551615"), stored},
			row{0, 11, 12, Input{Op: OpIncr, Delta: 2}, Output{Status: "1"}}), porcupine.Ok},
		{"incr changes cas", ops("k",
			row{0, 0, 10, set("5"), stored},
			row{0, 11, 12, Input{Op: OpGets}, gets("5", 7)},
			row{0, 13, 14, Input{Op: OpIncr, Delta: 1}, Output{Status: "6"}},
			row{0, 15, 16, Input{Op: OpGets}, gets("6", 7)}), porcupine.Illegal},
		{"set value with trailing space differs", ops("k",
			row{0, 0, 10, set("a "), stored},
			row{1, 20, 30, get, val("a")}), porcupine.Illegal},
		// incr/decr pad a shorter number with spaces to the old value's
		// length (memcached's in-place rewrite) or store it bare (its new
		// item); no other width.
		{"counter padded to the old length", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 95}, Output{Status: "5"}},
			row{1, 13, 14, get, val("5  ")}), porcupine.Ok},
		{"counter stored bare", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 95}, Output{Status: "5"}},
			row{1, 13, 14, get, val("5")}), porcupine.Ok},
		{"counter padded past the old length", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 95}, Output{Status: "5"}},
			row{1, 13, 14, get, val("5   ")}), porcupine.Illegal},
		{"counter padded though it did not shrink", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpIncr, Delta: 5}, Output{Status: "105"}},
			row{1, 13, 14, get, val("105 ")}), porcupine.Illegal},
		{"padding kept through a second decr", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 90}, Output{Status: "10"}},
			row{0, 13, 14, Input{Op: OpDecr, Delta: 5}, Output{Status: "5"}},
			row{1, 15, 16, get, val("5  ")}), porcupine.Ok},
		{"padding switches width between reads", ops("k",
			row{0, 0, 10, Input{Op: OpAdd, Value: "100"}, stored},
			row{0, 11, 12, Input{Op: OpDecr, Delta: 95}, Output{Status: "5"}},
			row{1, 13, 14, get, val("5  ")},
			row{1, 15, 16, get, val("5")}), porcupine.Illegal},
		{"unknown delete of missing read a value", ops("k",
			row{0, 0, -1, Input{Op: OpDelete}, Output{}},
			row{1, 20, 30, get, val("a")}), porcupine.Illegal},
		{"unknown add on existing", ops("k",
			row{0, 0, 10, set("a"), stored},
			row{0, 11, -1, Input{Op: OpAdd, Value: "b"}, Output{}},
			row{1, 20, 30, get, val("b")}), porcupine.Illegal},
		{"two unknowns both applied in any order", ops("k",
			row{0, 0, -1, set("a"), Output{}},
			row{1, 0, -1, set("b"), Output{}},
			row{2, 20, 30, get, val("a")},
			row{2, 40, 50, get, val("b")},
			row{2, 60, 70, get, val("a")}), porcupine.Illegal},
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
