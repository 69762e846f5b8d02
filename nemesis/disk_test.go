package nemesis

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// layered is a one-node target whose data is a real lazyfs mount, served by
// a child process (lazyfstest).
type layered struct {
	m       *lazyfstest.Layer
	started int
}

func (l *layered) Nodes() []Node                                 { return []Node{{Name: "n1", Role: "reference"}} }
func (l *layered) DiskNodes() []string                           { return []string{"n1"} }
func (l *layered) PowerNodes() []string                          { return []string{"n1"} }
func (l *layered) KillNode(context.Context, string) error        { return nil }
func (l *layered) StartNode(context.Context, string, bool) error { l.started++; return nil }
func (l *layered) CutPower(context.Context, string) (lazyfs.Loss, error) {
	return l.m.PowerLoss()
}
func (l *layered) SetDiskFaults(_ context.Context, _ string, f lazyfs.Faults) error {
	return l.m.SetFaults(f)
}
func (l *layered) CorruptDisk(_ context.Context, _ string, c lazyfs.Corruption) (lazyfs.Corrupted, error) {
	return l.m.Corrupt(c)
}

func newLayered(t *testing.T) *layered {
	root := t.TempDir()
	return &layered{m: lazyfstest.Start(t, lazyfstest.Spec{Backing: filepath.Join(root, "data"), Mount: filepath.Join(root, "mnt")})}
}

func timedSync(t *testing.T, path string) (time.Duration, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	start := time.Now()
	err = f.Sync()
	return time.Since(start), err
}

// Each disk fault seen from the program's side of the mount (and the
// disk's, for a corruption), and gone once the fault stops.
func TestDiskFaultsShowOnTheMount(t *testing.T) {
	l := newLayered(t)
	env := &Env{Target: l}
	path := filepath.Join(l.m.Dir(), "state")
	require.NoError(t, os.WriteFile(path, []byte("some durable state"), 0o644))
	_, err := timedSync(t, path)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(1, 1))
	ctx := context.Background()

	for _, kind := range []string{DiskSlowName, DiskFullName, DiskCorrupt} {
		d := disk{kind: kind}
		ok, why := d.Applicable(env)
		require.True(t, ok, why)
		p, err := d.Draw(ctx, env, rng)
		require.NoError(t, err)
		require.NoError(t, d.CheckPlan(env, p))
		f, err := d.Start(ctx, env, p)
		require.NoError(t, err)
		params := p.Params.(*diskFault)
		switch kind {
		case DiskSlowName:
			took, err := timedSync(t, path)
			require.NoError(t, err)
			assert.GreaterOrEqual(t, took, time.Duration(params.FsyncDelayMS)*time.Millisecond)
			require.NoError(t, f.Stop(ctx))
			took, _ = timedSync(t, path)
			assert.Less(t, took, 15*time.Millisecond, "healed")
		case DiskFullName:
			fh, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
			require.NoError(t, err)
			_, err = fh.Write([]byte(" and more"))
			assert.True(t, errors.Is(err, syscall.ENOSPC), "full: %v", err)
			require.NoError(t, f.Stop(ctx))
			_, err = fh.Write([]byte(" and more"))
			assert.NoError(t, err, "room again")
			require.NoError(t, fh.Sync())
			fh.Close()
		case DiskCorrupt:
			assert.Equal(t, "state", f.Details["file"])
			disk, _ := os.ReadFile(filepath.Join(l.m.Backing(), "state"))
			seen, _ := os.ReadFile(path)
			assert.Equal(t, string(disk), string(seen), "the node comes back on the damaged disk")
			assert.NotEqual(t, "some durable state and more", string(seen))
			require.NoError(t, f.Stop(ctx))
			assert.Equal(t, 1, l.started)
		}
	}
	assert.Error(t, disk{kind: DiskSlowName}.CheckPlan(env, Plan{Nodes: []string{"n1"}, Params: &diskFault{Mode: DiskFull}}), "disk-slow's mode is slow-fsync")
}

// twoDisks is a target of two nodes whose disks can be made slow or full;
// only Draw is asked of it.
type twoDisks struct{ DiskFaulter }

func (twoDisks) Nodes() []Node       { return []Node{{Name: "n1"}, {Name: "n2"}} }
func (twoDisks) DiskNodes() []string { return []string{"n1", "n2"} }

// A slow or full disk does not take its node over, but waits for a node
// another fault holds (a cut that needs its two nodes answering in time):
// under all, a slow fsync on a follower cut from its leader made the
// leader's confirmations time out, and the leader caught up at once.
func TestASlowOrFullDiskPicksANodeNoFaultHolds(t *testing.T) {
	env := &Env{Target: twoDisks{}, claims: newClaims()}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 3))
	require.True(t, env.claims.claimAll([]string{"n1"}, 1))
	for _, kind := range []string{DiskSlowName, DiskFullName} {
		for range 20 {
			p, err := disk{kind: kind}.Draw(ctx, env, rng)
			require.NoError(t, err)
			assert.Equal(t, []string{"n2"}, p.Nodes, kind)
			assert.False(t, p.TakesOver, kind)
		}
	}
	require.True(t, env.claims.claimAll([]string{"n2"}, 2))
	_, err := disk{kind: DiskSlowName}.Draw(ctx, env, rng)
	assert.ErrorIs(t, err, ErrBusy)
}
