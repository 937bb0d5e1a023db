package robustness

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// metaConn is one connection speaking memcached's meta commands: the same
// operations as mcConn, through mg, ms, md and ma, so that the model checks
// meta clients' histories alike on the same keys. It shares mcConn's
// framing (one request at a time, the reply read to its end) and its
// classes of errors; replies come back in the text protocol's words, which
// the model knows.
type metaConn struct {
	*mcConn
}

func dialMeta(addr string, timeout time.Duration) (*metaConn, error) {
	mc, err := dialMC(addr, timeout)
	if err != nil {
		return nil, err
	}
	return &metaConn{mc}, nil
}

// get runs "mg <key> v f" (and c for gets): "VA <size> f<flags>[ c<cas>]"
// and the value, or EN.
func (m *metaConn) get(key string, withCAS bool) (item, error) {
	req := "mg " + key + " v f"
	if withCAS {
		req += " c"
	}
	if err := m.exchange(req + "\r\n"); err != nil {
		return item{}, err
	}
	l, err := m.line()
	if err != nil {
		return item{}, err
	}
	if l == "EN" {
		return item{}, nil
	}
	// The workload stores every item with flags 0; the tokens come back
	// in the order asked.
	f := strings.Split(l, " ")
	want := 3
	if withCAS {
		want = 4
	}
	if len(f) != want || f[0] != "VA" || f[2] != "f0" || (withCAS && !strings.HasPrefix(f[3], "c")) {
		return item{}, fmt.Errorf("%w: unexpected mg reply %q", errProtocol, l)
	}
	size, err := strconv.Atoi(f[1])
	if err != nil || size < 0 || size > 1<<20 {
		return item{}, fmt.Errorf("%w: bad size in %q", errProtocol, l)
	}
	it := item{Found: true}
	if withCAS {
		if it.CAS, err = strconv.ParseUint(f[3][1:], 10, 64); err != nil {
			return item{}, fmt.Errorf("%w: bad cas in %q", errProtocol, l)
		}
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(m.r, data); err != nil {
		return item{}, fmt.Errorf("read value: %w", err)
	}
	if string(data[size:]) != "\r\n" {
		return item{}, fmt.Errorf("%w: %d-byte value of %q not followed by \\r\\n", errProtocol, size, key)
	}
	it.Value = string(data[:size])
	return it, nil
}

// metaStoreModes are ms's M tokens for the workload's store verbs; cas is
// a set with C, which memcached runs as its cas.
var metaStoreModes = map[string]string{"set": "", "add": " ME", "replace": " MR", "cas": ""}

// store runs ms and answers in the text protocol's words: HD STORED, NS
// NOT_STORED, EX EXISTS, NF NOT_FOUND.
func (m *metaConn) store(verb, key, value string, token uint64) (string, error) {
	mode, ok := metaStoreModes[verb]
	if !ok {
		return "", fmt.Errorf("%w: store verb %q", errNotSent, verb)
	}
	req := fmt.Sprintf("ms %s %d%s", key, len(value), mode)
	if verb == "cas" {
		req += " C" + strconv.FormatUint(token, 10)
	}
	if err := m.exchange(req + "\r\n" + value + "\r\n"); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	word := map[string]string{"HD": "STORED", "NS": "NOT_STORED", "EX": "EXISTS", "NF": "NOT_FOUND"}[l]
	if word == "" || (verb != "cas" && (word == "EXISTS" || word == "NOT_FOUND")) {
		return "", fmt.Errorf("%w: %s (ms) reply %q", errProtocol, verb, l)
	}
	return word, nil
}

// delete runs md: HD DELETED, NF NOT_FOUND.
func (m *metaConn) delete(key string) (string, error) {
	if err := m.exchange("md " + key + "\r\n"); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	switch l {
	case "HD":
		return "DELETED", nil
	case "NF":
		return "NOT_FOUND", nil
	}
	return "", fmt.Errorf("%w: md reply %q", errProtocol, l)
}

// arith runs "ma <key> D<delta> v" (MD to decrement): "VA <n>" and the new
// value, or NF.
func (m *metaConn) arith(verb, key string, delta uint64) (string, error) {
	req := fmt.Sprintf("ma %s D%d v", key, delta)
	if verb == "decr" {
		req += " MD"
	}
	if err := m.exchange(req + "\r\n"); err != nil {
		return "", err
	}
	l, err := m.line()
	if err != nil {
		return "", err
	}
	if l == "NF" {
		return "NOT_FOUND", nil
	}
	f := strings.Split(l, " ")
	size := 0
	if len(f) == 2 && f[0] == "VA" {
		size, err = strconv.Atoi(f[1])
	}
	if len(f) != 2 || f[0] != "VA" || err != nil || size < 1 || size > 20 {
		return "", fmt.Errorf("%w: %s (ma) reply %q", errProtocol, verb, l)
	}
	data := make([]byte, size+2)
	if _, err := io.ReadFull(m.r, data); err != nil {
		return "", fmt.Errorf("read value: %w", err)
	}
	v := string(data[:size])
	if string(data[size:]) != "\r\n" {
		return "", fmt.Errorf("%w: %s (ma) value %q not followed by \\r\\n", errProtocol, verb, data)
	}
	if _, err := strconv.ParseUint(v, 10, 64); err != nil {
		return "", fmt.Errorf("%w: %s (ma) value %q", errProtocol, verb, v)
	}
	return v, nil
}
