package failpoint

import (
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		want    []Point
		wantErr string // a substring of the error; "" for success
	}{
		{spec: "", want: nil},
		{spec: "  ", want: nil},
		{spec: "raftlog/after-sync=crash@3", want: []Point{{Name: RaftlogAfterSync, Kind: Crash, At: 3}}},
		{spec: "raftlog/after-sync=crash", want: []Point{{Name: RaftlogAfterSync, Kind: Crash, At: 1}}},
		{spec: "fsm/before-apply=sleep(200ms)", want: []Point{{Name: FSMBeforeApply, Kind: Sleep, Sleep: 200 * time.Millisecond}}},
		{spec: "fsm/before-apply=sleep(1s)@2", want: []Point{{Name: FSMBeforeApply, Kind: Sleep, Sleep: time.Second, At: 2}}},
		{spec: " snapshot/send = crash@2 ; snapshot/install=crash ",
			want: []Point{{Name: SnapshotSend, Kind: Crash, At: 2}, {Name: SnapshotInstall, Kind: Crash, At: 1}}},
		{spec: "raftlog/after-synk=crash", wantErr: `unknown failpoint "raftlog/after-synk"`},
		{spec: "raftlog/after-sync", wantErr: "want name=action"},
		{spec: "raftlog/after-sync=panic", wantErr: `unknown action "panic"`},
		{spec: "raftlog/after-sync=crash@0", wantErr: "hit count"},
		{spec: "raftlog/after-sync=crash@-1", wantErr: "hit count"},
		{spec: "raftlog/after-sync=crash@three", wantErr: "hit count"},
		{spec: "raftlog/after-sync=crash@", wantErr: "hit count"},
		{spec: "raftlog/after-sync=crash@1000000001", wantErr: "hit count"},
		{spec: "raftlog/after-sync=crash@1@2", wantErr: "hit count"},
		{spec: "fsm/after-apply=sleep(0s)", wantErr: "sleep"},
		{spec: "fsm/after-apply=sleep(-1s)", wantErr: "sleep"},
		{spec: "fsm/after-apply=sleep(11m)", wantErr: "sleep"},
		{spec: "fsm/after-apply=sleep(soon)", wantErr: "sleep"},
		{spec: "fsm/after-apply=sleep(1s", wantErr: "unknown action"},
		{spec: "fsm/after-apply=crash;", wantErr: "want name=action"},
		{spec: "fsm/after-apply=crash;fsm/after-apply=sleep(1ms)", wantErr: "armed twice"},
		{spec: "=crash", wantErr: "unknown failpoint"},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			got, err := Parse(tt.spec)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) = %v, %v; want an error containing %q", tt.spec, got, err, tt.wantErr)
				}
				if !strings.Contains(err.Error(), EnvVar) {
					t.Errorf("error %q does not say it is about %s", err, EnvVar)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.spec, err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("Parse(%q) = %v, want %v", tt.spec, got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Errorf("Parse(%q)[%d] = %+v, want %+v", tt.spec, i, got[i], tt.want[i])
				}
			}
		})
	}
}

func TestParseArm(t *testing.T) {
	tests := []struct {
		v       string
		want    bool
		wantErr bool
	}{
		{v: "", want: false},
		{v: "usr1", want: true},
		{v: " usr1 ", want: true},
		{v: "USR1", wantErr: true},
		{v: "usr2", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseArm(tt.v)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseArm(%q) = %v, %v; want %v, error %v", tt.v, got, err, tt.want, tt.wantErr)
		}
	}
}

// Every name a call site uses can be armed, and the names are distinct.
func TestNames(t *testing.T) {
	seen := map[string]bool{}
	for _, n := range Names() {
		if seen[n] {
			t.Errorf("%s listed twice", n)
		}
		seen[n] = true
		if _, err := Parse(n + "=crash@2"); err != nil {
			t.Errorf("%s does not arm: %v", n, err)
		}
	}
}

// FuzzParse: any spec either fails with an error naming KVD_FAILPOINTS or
// gives points that are well formed and print back to a spec that parses
// to the same points.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"", "raftlog/after-sync=crash@3", "fsm/before-apply=sleep(200ms)",
		"snapshot/send=crash@2;snapshot/receive=sleep(1s)@4", "x=crash", "fsm/after-apply=sleep(1s"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, spec string) {
		ps, err := Parse(spec)
		if err != nil {
			if !strings.Contains(err.Error(), EnvVar) {
				t.Fatalf("error %q does not name %s", err, EnvVar)
			}
			return
		}
		var again []string
		for _, p := range ps {
			if !known(p.Name) {
				t.Fatalf("unknown name %q accepted", p.Name)
			}
			switch p.Kind {
			case Crash:
				if p.At == 0 || p.At > maxCount || p.Sleep != 0 {
					t.Fatalf("bad crash point %+v", p)
				}
			case Sleep:
				if p.Sleep <= 0 || p.Sleep > maxSleep || p.At > maxCount {
					t.Fatalf("bad sleep point %+v", p)
				}
			default:
				t.Fatalf("point %+v has no action", p)
			}
			again = append(again, p.String())
		}
		ps2, err := Parse(strings.Join(again, ";"))
		if err != nil || len(ps2) != len(ps) {
			t.Fatalf("printed spec %q does not parse back: %v, %v", again, ps2, err)
		}
		for i := range ps {
			if ps[i] != ps2[i] {
				t.Fatalf("round trip changed %+v into %+v", ps[i], ps2[i])
			}
		}
	})
}
