package bench

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// etcdDriver runs the workloads against etcd's v3 KV API through the
// official Go client (gRPC). A get is a Range of one key, a set a Put. Each
// worker owns one client bound to one endpoint, like a memcache connection.
// etcd has no pipelining in the memcached sense: a pipeline depth above 1
// issues that many requests concurrently on the client's HTTP/2 connection.
type etcdDriver struct {
	log *zap.Logger
}

func newEtcdDriver() etcdDriver { return etcdDriver{log: zap.NewNop()} }

func (etcdDriver) Name() string       { return "etcd" }
func (etcdDriver) MemcacheKeys() bool { return false }

type etcdConn struct {
	cli     *clientv3.Client
	timeout time.Duration
}

func (d etcdDriver) dial(ctx context.Context, addr string, timeout time.Duration) (*clientv3.Client, error) {
	ep := addr
	if !strings.Contains(ep, "://") {
		ep = "http://" + ep
	}
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:   []string{ep},
		DialTimeout: timeout,
		Context:     ctx,
		Logger:      d.log,
		// Block until connected so an unreachable endpoint is a dial error,
		// counted as such, not a timeout of every request. clientv3 3.5
		// still dials with grpc.DialContext, where WithBlock is honoured.
		//lint:ignore SA1019 deliberate, see above
		DialOptions: []grpc.DialOption{grpc.WithBlock()},
	})
	if err != nil {
		if ctx.Err() == nil && isTimeout(err) {
			return nil, &OpError{Kind: ErrConnectTimeout, Msg: "etcd " + addr + ": no connection within " + timeout.String()}
		}
		return nil, classifyDial(err)
	}
	return cli, nil
}

func (d etcdDriver) Dial(ctx context.Context, addr string, timeout time.Duration) (Conn, error) {
	cli, err := d.dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &etcdConn{cli: cli, timeout: timeout}, nil
}

func (c *etcdConn) Close() error { return c.cli.Close() }

func (c *etcdConn) Do(ctx context.Context, ops []Op, res []Result) error {
	if len(ops) == 1 {
		return c.one(ctx, &ops[0], &res[0])
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		fatal error
	)
	for i := range ops {
		wg.Go(func() {
			if err := c.one(ctx, &ops[i], &res[i]); err != nil {
				mu.Lock()
				fatal = err
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return fatal
}

// one runs a single op; a non-nil return means the client should be
// replaced (the endpoint is unreachable or not answering).
func (c *etcdConn) one(ctx context.Context, op *Op, r *Result) error {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	r.Hit, r.Err = false, nil
	var err error
	switch op.Kind {
	case OpGet:
		var resp *clientv3.GetResponse
		resp, err = c.cli.Get(rctx, string(op.Key))
		if err == nil && len(resp.Kvs) > 0 {
			r.Hit = true
			r.Value = append(r.Value[:0], resp.Kvs[0].Value...)
		}
	case OpSet:
		_, err = c.cli.Put(rctx, string(op.Key), string(op.Value))
	}
	r.Done = time.Now()
	if err == nil {
		return nil
	}
	r.Err = classifyEtcd(err)
	switch r.Err.Kind {
	case ErrTimeout, ErrUnavailable:
		return r.Err
	}
	return nil
}

func classifyEtcd(err error) *OpError {
	if errors.Is(err, context.DeadlineExceeded) {
		return &OpError{Kind: ErrTimeout, Msg: err.Error()}
	}
	if errors.Is(err, context.Canceled) {
		return &OpError{Kind: ErrAborted, Msg: err.Error()}
	}
	if s, ok := status.FromError(err); ok {
		switch s.Code() {
		case codes.DeadlineExceeded:
			return &OpError{Kind: ErrTimeout, Msg: s.Message()}
		case codes.Unavailable:
			return &OpError{Kind: ErrUnavailable, Msg: s.Message()}
		case codes.Canceled:
			return &OpError{Kind: ErrAborted, Msg: s.Message()}
		}
		return &OpError{Kind: ErrServer, Msg: s.Code().String() + ": " + s.Message()}
	}
	return &OpError{Kind: ErrServer, Msg: err.Error()}
}

// Info reports the endpoint's version, database size and raft position.
func (d etcdDriver) Info(ctx context.Context, addr string, timeout time.Duration) (map[string]string, error) {
	cli, err := d.dial(ctx, addr, timeout)
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	sctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := cli.Status(sctx, cli.Endpoints()[0])
	if err != nil {
		return nil, classifyEtcd(err)
	}
	return map[string]string{
		"version":    st.Version,
		"db_size":    strconv.FormatInt(st.DbSize, 10),
		"raft_index": strconv.FormatUint(st.RaftIndex, 10),
		"is_leader":  strconv.FormatBool(st.Header != nil && st.Leader == st.Header.MemberId),
	}, nil
}
