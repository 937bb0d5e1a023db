package robustness

import "testing"

func TestFaultRegistry(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Faults() {
		if f.Name == "" || f.Inject == nil || len(f.Sizes) == 0 {
			t.Errorf("incomplete fault %+v", f)
		}
		if seen[f.Name] {
			t.Errorf("fault %s registered twice", f.Name)
		}
		seen[f.Name] = true
		if g, err := FaultByName(f.Name); err != nil || g.Name != f.Name {
			t.Errorf("FaultByName(%s) = %v, %v", f.Name, g.Name, err)
		}
	}
	if _, err := FaultByName("no-such-fault"); err == nil {
		t.Error("an unknown fault name was accepted")
	}
}
