package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"
)

// Error kinds, the keys of a report's errors-by-kind table.
const (
	ErrConnectRefused = "connect_refused" // nobody listens at the address
	ErrConnectTimeout = "connect_timeout" // the dial did not finish within --timeout
	ErrConnect        = "connect"         // any other dial failure
	ErrConnClosed     = "conn_closed"     // EOF or reset while a request was in flight
	ErrIO             = "io"              // any other read/write failure
	ErrTimeout        = "timeout"         // no reply within --timeout
	ErrServer         = "server_error"    // SERVER_ERROR …, or an etcd server-side error
	ErrClient         = "client_error"    // CLIENT_ERROR …
	ErrUnknownCommand = "error"           // a bare ERROR line
	ErrProtocol       = "protocol"        // a reply the client cannot parse
	ErrNotStored      = "not_stored"      // NOT_STORED / EXISTS / NOT_FOUND to a set
	ErrAborted        = "aborted"         // pipelined after a reply that desynchronised the connection
	ErrUnavailable    = "unavailable"     // etcd: no connection to the endpoint / no leader
	ErrAuth           = "auth"            // the server refused the --user credentials
)

// OpError is a classified failure of one operation or one dial.
type OpError struct {
	Kind string
	Msg  string
}

func (e *OpError) Error() string { return e.Kind + ": " + e.Msg }

// Result is the outcome of one Op.
type Result struct {
	Hit   bool
	Value []byte   // the value read by a get hit; reused by the next Do
	Err   *OpError // nil on success (a miss is a success)
	Done  time.Time
}

// Conn is one client connection of a driver. It is used by one goroutine.
type Conn interface {
	// Do runs ops in order, pipelined when the driver can, and fills
	// res[i] for every i. A non-nil error means the connection is no
	// longer usable; the caller closes it and dials again.
	Do(ctx context.Context, ops []Op, res []Result) error
	Close() error
}

// Driver speaks one protocol.
type Driver interface {
	// Name is "memcache" or "etcd".
	Name() string
	// Dial connects to addr within timeout; its error is an *OpError.
	Dial(ctx context.Context, addr string, timeout time.Duration) (Conn, error)
	// Info returns server facts worth reporting (version, items, bytes).
	Info(ctx context.Context, addr string, timeout time.Duration) (map[string]string, error)
	// MemcacheKeys reports whether memcached's key rules apply.
	MemcacheKeys() bool
}

// NewDriver returns the driver for cfg.Target ("memcache" or "etcd"), with
// cfg's TLS and credentials.
func NewDriver(cfg Config) (Driver, error) {
	switch target := cfg.Target; target {
	case "memcache", "memcached":
		return memcacheDriver{tls: cfg.TLS, user: cfg.User, password: cfg.Password}, nil
	case "etcd":
		return newEtcdDriver(), nil
	}
	return nil, fmt.Errorf("--target: %q is not memcache or etcd", cfg.Target)
}

// classifyDial names a dial failure.
func classifyDial(err error) *OpError {
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return &OpError{Kind: ErrConnectRefused, Msg: err.Error()}
	case isTimeout(err):
		return &OpError{Kind: ErrConnectTimeout, Msg: err.Error()}
	}
	return &OpError{Kind: ErrConnect, Msg: err.Error()}
}

// classifyIO names a read or write failure on an established connection.
func classifyIO(err error) *OpError {
	switch {
	case isTimeout(err):
		return &OpError{Kind: ErrTimeout, Msg: err.Error()}
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE), errors.Is(err, net.ErrClosed):
		return &OpError{Kind: ErrConnClosed, Msg: err.Error()}
	}
	return &OpError{Kind: ErrIO, Msg: err.Error()}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// failRest marks res[from:] as failed with e (and stamps them).
func failRest(res []Result, from int, e *OpError) {
	now := time.Now()
	for i := from; i < len(res); i++ {
		res[i].Hit = false
		res[i].Err = e
		res[i].Done = now
	}
}
