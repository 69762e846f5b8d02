package nemesis

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// committingNode is a one-node system on a real lazyfs layer shaped like
// etcd v3.5.0 with one member (#14370): each write is appended to its log
// (wal/log), and while the log's fsync is under way the write is applied
// to its state (db), which is committed (two fsyncs, as bbolt's pages and
// meta) before the answer, as etcd's apply waits for its backend's commit.
// The answer never waits for the log's fsync. It stops at the first failed
// fsync.
type committingNode struct {
	*layered
	rec *history.Recorder

	mu       sync.Mutex
	answered int
	stopped  chan struct{}
}

// loggedNode is a committingNode that says where its log is.
type loggedNode struct{ *committingNode }

func (loggedNode) LogPaths(string) []string { return []string{"wal"} }

func (n *committingNode) ArmPowerCut(_ context.Context, _ string, window time.Duration) error {
	return n.m.ArmCut(window)
}

func (n *committingNode) CutPower(context.Context, string) (lazyfs.Loss, error) {
	<-n.stopped
	return n.m.PowerLoss()
}

func (n *committingNode) start(t *testing.T, ctx context.Context) {
	d := n.m.Dir()
	require.NoError(t, os.Mkdir(filepath.Join(d, "wal"), 0o755))
	for _, p := range []string{"wal/log", "db"} {
		require.NoError(t, os.WriteFile(filepath.Join(d, p), []byte("0"), 0o644))
		fsyncPath(t, filepath.Join(d, p))
	}
	fsyncPath(t, filepath.Join(d, "wal"))
	fsyncPath(t, d)
	go n.serve(ctx)
}

func fsyncPath(t *testing.T, p string) {
	f, err := os.Open(p)
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, f.Close())
}

// write truncates p to v and, with sync, fsyncs it.
func write(p, v string, sync bool) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := f.WriteString(v); err != nil {
		return err
	}
	if sync {
		return f.Sync()
	}
	return nil
}

func (n *committingNode) serve(ctx context.Context) {
	defer close(n.stopped)
	d := n.m.Dir()
	for i := 1; ctx.Err() == nil; i++ {
		v := strconv.Itoa(i)
		n.rec.Record(history.Event{Process: 0, Type: history.Invoke, F: history.Write, Key: "k", Node: "n1"})
		if err := write(filepath.Join(d, "wal", "log"), v, false); err != nil {
			return
		}
		logged := make(chan error, 1)
		go func() { logged <- write(filepath.Join(d, "wal", "log"), v, true) }()
		err := write(filepath.Join(d, "db"), "pages "+v, true)
		if err == nil {
			err = write(filepath.Join(d, "db"), v, true)
		}
		if err == nil {
			n.mu.Lock()
			n.answered = i
			n.mu.Unlock()
			n.rec.Record(history.Event{Process: 0, Type: history.Ok, F: history.Write, Key: "k", Node: "n1"})
		}
		if err := <-logged; err != nil {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// A system that answers before its log's fsync returns but after a commit
// of its state that fsyncs as well (etcd v3.5.0 with one member) loses
// what it answered to a power cut on its acknowledgement only when the cut
// slows its log's fsyncs alone: with every fsync slowed, the commit holds
// the answer back until the log's fsync has ended, and nothing answered is
// lost.
func TestCrashOnAckSlowsOnlyTheLog(t *testing.T) {
	for _, onlyLog := range []bool{true, false} {
		for trial := range 3 {
			var buf bytes.Buffer
			rec, acks := ackedRecorder(&buf)
			n := &committingNode{layered: newLayered(t), rec: rec, stopped: make(chan struct{})}
			var target Cluster = n
			if onlyLog {
				target = loggedNode{n}
			}
			env := &Env{Target: target, Acks: acks}
			ctx, cancel := context.WithCancel(context.Background())
			n.start(t, ctx)
			p := Plan{Nodes: []string{"n1"}, TakesOver: true, Outage: true,
				Params: &ackCrash{Crash: CrashPower, After: history.Write, SlowFsyncMS: 40}}
			require.NoError(t, crashOnAck{}.CheckPlan(env, p))
			f, err := crashOnAck{}.Start(ctx, env, p)
			cancel()
			require.NoError(t, err)
			assert.Equal(t, true, f.Details["at_fsync"], "the cut met an fsync")

			n.mu.Lock()
			answered := n.answered
			n.mu.Unlock()
			got, err := os.ReadFile(filepath.Join(n.m.Backing(), "wal", "log"))
			require.NoError(t, err)
			durable, _ := strconv.Atoi(string(got))
			t.Logf("only the log slowed %v, trial %d: answered %d, durable %d", onlyLog, trial, answered, durable)
			if onlyLog {
				assert.Equal(t, "wal", f.Details["slow_fsync_of"])
				assert.Less(t, durable, answered, "what was answered before its log's fsync is lost")
			} else {
				assert.Nil(t, f.Details["slow_fsync_of"])
				assert.GreaterOrEqual(t, durable, answered, "the slowed commit held the answer back")
			}
		}
	}
}
