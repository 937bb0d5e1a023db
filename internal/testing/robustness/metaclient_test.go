package robustness

import (
	"errors"
	"testing"
	"time"
)

// TestMetaClientSpeaksTheModelsWords: a meta client's replies reach the
// model in the text protocol's words, failures of the server are unknown
// outcomes, and a reply no memcached would send, or one cut short, is no
// answer the model is given.
func TestMetaClientSpeaksTheModelsWords(t *testing.T) {
	tests := []struct {
		name    string
		reply   string
		do      func(*metaConn) (string, error)
		want    string
		wantErr error
	}{
		{"get hit with cas", "VA 1 f0 c77\r\nv\r\n", func(m *metaConn) (string, error) {
			it, err := m.get("k", true)
			if err == nil && (it.CAS != 77 || !it.Found) {
				return "", errors.New("cas not read")
			}
			return it.Value, err
		}, "v", nil},
		{"get miss", "EN\r\n", func(m *metaConn) (string, error) {
			it, err := m.get("k", false)
			if it.Found {
				return "found", err
			}
			return "END", err
		}, "END", nil},
		{"get with flags never written", "VA 1 f7\r\nv\r\n", func(m *metaConn) (string, error) {
			_, err := m.get("k", false)
			return "", err
		}, "", errProtocol},
		{"get without the cas asked for", "VA 1 f0\r\nv\r\n", func(m *metaConn) (string, error) {
			_, err := m.get("k", true)
			return "", err
		}, "", errProtocol},
		{"get with a bad data terminator", "VA 1 f0\r\nvv\r\n", func(m *metaConn) (string, error) {
			_, err := m.get("k", false)
			return "", err
		}, "", errProtocol},
		{"get cut short", "VA 5 f0\r\nv", func(m *metaConn) (string, error) {
			_, err := m.get("k", false)
			return "", err
		}, "", nil},
		{"add of an existing key", "NS\r\n", func(m *metaConn) (string, error) {
			return m.store("add", "k", "v", 0)
		}, "NOT_STORED", nil},
		{"cas stale", "EX\r\n", func(m *metaConn) (string, error) {
			return m.store("cas", "k", "v", 5)
		}, "EXISTS", nil},
		{"cas missing", "NF\r\n", func(m *metaConn) (string, error) {
			return m.store("cas", "k", "v", 5)
		}, "NOT_FOUND", nil},
		{"set stored", "HD\r\n", func(m *metaConn) (string, error) {
			return m.store("set", "k", "v", 0)
		}, "STORED", nil},
		{"a set answered not found", "NF\r\n", func(m *metaConn) (string, error) {
			return m.store("set", "k", "v", 0)
		}, "", errProtocol},
		{"delete hit", "HD\r\n", func(m *metaConn) (string, error) { return m.delete("k") }, "DELETED", nil},
		{"delete miss", "NF\r\n", func(m *metaConn) (string, error) { return m.delete("k") }, "NOT_FOUND", nil},
		{"incr", "VA 2\r\n42\r\n", func(m *metaConn) (string, error) { return m.arith("incr", "k", 1) }, "42", nil},
		{"decr miss", "NF\r\n", func(m *metaConn) (string, error) { return m.arith("decr", "k", 1) }, "NOT_FOUND", nil},
		{"incr answered HD", "HD\r\n", func(m *metaConn) (string, error) { return m.arith("incr", "k", 1) }, "", errProtocol},
		{"incr of no number", "VA 2\r\n4x\r\n", func(m *metaConn) (string, error) { return m.arith("incr", "k", 1) }, "", errProtocol},
		{"server error on a write", "SERVER_ERROR timeout\r\n", func(m *metaConn) (string, error) {
			return m.store("set", "k", "v", 0)
		}, "", errServer},
		{"client error to a delete", "CLIENT_ERROR bad command line format\r\n", func(m *metaConn) (string, error) {
			return m.delete("k")
		}, "", errProtocol},
		{"unknown-command error to a get", "ERROR\r\n", func(m *metaConn) (string, error) {
			_, err := m.get("k", false)
			return "", err
		}, "", errProtocol},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := dialMeta(fakeMC(t, tt.reply), 500*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			got, err := tt.do(m)
			switch {
			case tt.wantErr != nil && !errors.Is(err, tt.wantErr):
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			case tt.wantErr == nil && tt.want == "" && err == nil:
				t.Fatalf("a reply cut short read as %q", got)
			case tt.wantErr == nil && tt.want != "" && (err != nil || got != tt.want):
				t.Fatalf("got %q, %v; want %q", got, err, tt.want)
			case tt.wantErr == nil && tt.want == "" && (errors.Is(err, errProtocol) || errors.Is(err, errServer)):
				t.Fatalf("a reply cut short is an unknown outcome, not %v", err)
			}
		})
	}
}

// TestClientsTakeTurnsAtTheProtocols: client ids pick text, binary and
// meta in turn, so that every run's keys see all three.
func TestClientsTakeTurnsAtTheProtocols(t *testing.T) {
	for id, want := range []clientProto{protoText, protoBinary, protoMeta, protoText, protoBinary, protoMeta} {
		if got := newClient(id, nil, nil, time.Second, 1, newHistory()).proto; got != want {
			t.Fatalf("client %d speaks %d, want %d", id, got, want)
		}
	}
}
