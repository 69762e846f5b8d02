package memory

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/history"
)

var bg = context.Background()

func startNode(t *testing.T, bugs ...Bug) (*Node, *fencing.Client) {
	t.Helper()
	set := Bugs{}
	for _, b := range bugs {
		set[b] = true
	}
	n, err := NewNode(Config{Dir: t.TempDir(), Bugs: set})
	require.NoError(t, err)
	url, err := n.Start("")
	require.NoError(t, err)
	t.Cleanup(func() { n.Stop() })
	return n, fencing.NewClient(url, nil)
}

// restart kills and restarts n, then lets c notice its dead keep-alive
// connection on a harmless GET (which the transport may retry): a PUT or POST
// on it would rightly come back info.
func restart(t *testing.T, n *Node, c *fencing.Client, wipe bool) {
	t.Helper()
	require.NoError(t, n.Restart(wipe))
	require.NoError(t, c.Health(bg))
}

func acquire(t *testing.T, c *fencing.Client, lock, owner string) uint64 {
	t.Helper()
	r := c.Acquire(bg, lock, owner, time.Minute)
	require.Equal(t, fencing.Ok, r.Outcome, "%s %s", r.Error, r.Message)
	n, _, err := history.SplitToken(r.Token)
	require.NoError(t, err)
	return n
}

func write(c *fencing.Client, key string, token uint64, value string) fencing.Result {
	return c.Write(bg, key, strconv.FormatUint(token, 10), []byte(value))
}

// history writes some state: lock l issued tokens 1..3 (c3 holds it), key k
// has high-water 3 and value v3.
func seed(t *testing.T, c *fencing.Client) {
	t.Helper()
	for i := 1; i <= 3; i++ {
		owner := fmt.Sprintf("c%d", i)
		tok := acquire(t, c, "l", owner)
		require.Equal(t, uint64(i), tok)
		require.Equal(t, fencing.Ok, write(c, "k", tok, "v"+strconv.Itoa(i)).Outcome)
		if i < 3 {
			require.Equal(t, fencing.Ok, c.Release(bg, "l", owner, strconv.FormatUint(tok, 10)).Outcome)
		}
	}
}

func TestDurableAcrossKill(t *testing.T) {
	n, c := startNode(t)
	seed(t, c)
	url := n.URL()
	restart(t, n, c, false)
	assert.Equal(t, url, n.URL(), "a restart keeps the address")

	// The holder's lease survived, and so did the counter and the mark.
	assert.Equal(t, "held", c.Acquire(bg, "l", "c9", time.Second).Error)
	assert.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
	assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"))
	r := write(c, "k", 2, "late")
	assert.Equal(t, "stale", r.Error)
	assert.Equal(t, "3", r.HighWater)
	r = c.Read(bg, "k")
	assert.Equal(t, "v3", string(r.Value))
	assert.Equal(t, "3", r.Token)
}

func TestRestartWipeResetsEverything(t *testing.T) {
	n, c := startNode(t)
	seed(t, c)
	restart(t, n, c, true)
	assert.Equal(t, uint64(1), acquire(t, c, "l", "c9"))
	assert.False(t, c.Read(bg, "k").Found)
}

func TestBugCounterInMemory(t *testing.T) {
	n, c := startNode(t, CounterInMemory)
	seed(t, c)
	restart(t, n, c, false)
	require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome, "holders stay durable")
	assert.Equal(t, uint64(1), acquire(t, c, "l", "c4"), "the counter starts again from 0")
	assert.Equal(t, "stale", write(c, "k", 1, "x").Error, "the high-water mark stays durable")
}

func TestBugForgetHighwater(t *testing.T) {
	n, c := startNode(t, ForgetHighwater)
	seed(t, c)
	restart(t, n, c, false)
	assert.False(t, c.Read(bg, "k").Found, "values are forgotten")
	assert.Equal(t, fencing.Ok, write(c, "k", 1, "old token accepted").Outcome)
	require.Equal(t, fencing.Ok, c.Release(bg, "l", "c3", "3").Outcome)
	assert.Equal(t, uint64(4), acquire(t, c, "l", "c4"), "the counter stays durable")
}

func TestBugAcceptEqual(t *testing.T) {
	_, correct := startNode(t)
	_, buggy := startNode(t, AcceptEqual)
	for _, c := range []*fencing.Client{correct, buggy} {
		require.Equal(t, fencing.Ok, write(c, "k", 5, "a").Outcome)
		assert.Equal(t, "stale", write(c, "k", 4, "b").Error)
	}
	assert.Equal(t, "stale", write(correct, "k", 5, "replay").Error)
	assert.Equal(t, fencing.Ok, write(buggy, "k", 5, "replay").Outcome)
	assert.Equal(t, "replay", string(buggy.Read(bg, "k").Value))
}

func TestBugNoFencing(t *testing.T) {
	_, c := startNode(t, NoFencing)
	require.Equal(t, fencing.Ok, write(c, "k", 5, "a").Outcome)
	require.Equal(t, fencing.Ok, write(c, "k", 2, "b").Outcome)
	r := c.Read(bg, "k")
	assert.Equal(t, "b", string(r.Value))
	assert.Equal(t, "2", r.Token, "the token of the value is still kept")
	assert.Equal(t, 428, c.Write(bg, "k", "", []byte("none")).Status, "a token is still required")
}

func TestBugMissingAsZero(t *testing.T) {
	_, c := startNode(t, MissingAsZero)
	require.Equal(t, fencing.Ok, write(c, "k", 5, "a").Outcome)
	require.Equal(t, fencing.Ok, c.Write(bg, "k", "", []byte("tokenless")).Outcome)
	r := c.Read(bg, "k")
	assert.Equal(t, "tokenless", string(r.Value))
	assert.Equal(t, "0", r.Token)
	assert.Equal(t, "stale", write(c, "k", 5, "b").Error, "the mark is untouched")
}

func TestBugWallclockTokens(t *testing.T) {
	n, c := startNode(t, WallclockTokens)
	before := uint64(time.Now().UnixMilli())
	tok := acquire(t, c, "l", "c1")
	assert.GreaterOrEqual(t, tok, before)
	n.Clock().Set(-time.Hour)
	require.Equal(t, fencing.Ok, c.Release(bg, "l", "c1", strconv.FormatUint(tok, 10)).Outcome)
	tok2 := acquire(t, c, "l", "c2")
	assert.Less(t, tok2, tok, "a step back makes tokens smaller")
}

func TestSealedNodeAndAcceptForged(t *testing.T) {
	n, err := NewNode(Config{Dir: t.TempDir(), SealKey: []byte("k")})
	require.NoError(t, err)
	url, err := n.Start("")
	require.NoError(t, err)
	defer n.Stop()
	c := fencing.NewClient(url, nil)
	r := c.Acquire(bg, "l", "c1", time.Second)
	require.Equal(t, fencing.Ok, r.Outcome)
	assert.Equal(t, fencing.NewSealer([]byte("k")).Seal(1), r.Token)
	assert.Equal(t, 403, write(c, "k", 99, "forged").Status)
	assert.Equal(t, fencing.Ok, c.Write(bg, "k", r.Token, []byte("sealed")).Outcome)

	_, buggy := startNode(t, AcceptForged)
	r = buggy.Acquire(bg, "l", "c1", time.Second)
	require.Equal(t, fencing.Ok, r.Outcome)
	assert.Contains(t, r.Token, ".", "accept-forged seals tokens even without a key")
	assert.Equal(t, fencing.Ok, write(buggy, "k", 99, "forged").Outcome)
}

func TestLeaseFollowsClock(t *testing.T) {
	n, c := startNode(t)
	tok := acquire(t, c, "l", "c1")
	assert.Equal(t, "held", c.Acquire(bg, "l", "c2", time.Second).Error)
	n.Clock().Set(2 * time.Minute) // past c1's one-minute lease
	assert.Equal(t, tok+1, acquire(t, c, "l", "c2"), "a forward jump expires the lease early")
	assert.Equal(t, "lost", c.Renew(bg, "l", "c1", strconv.FormatUint(tok, 10), time.Second).Error)
	// Fencing still protects the resource from the old holder.
	require.Equal(t, fencing.Ok, write(c, "k", tok+1, "new").Outcome)
	assert.Equal(t, "stale", write(c, "k", tok, "late").Error)
}

func TestRenewAndReleaseRules(t *testing.T) {
	n, c := startNode(t)
	tok := strconv.FormatUint(acquire(t, c, "l", "c1"), 10)
	assert.Equal(t, fencing.Ok, c.Renew(bg, "l", "c1", tok, 3*time.Minute).Outcome)
	n.Clock().Set(2 * time.Minute)
	assert.Equal(t, "held", c.Acquire(bg, "l", "c2", time.Second).Error, "renew extended the lease")
	assert.Equal(t, "lost", c.Release(bg, "l", "c2", tok).Error)
	assert.Equal(t, fencing.Ok, c.Acquire(bg, "l", "c1", time.Second).Outcome, "the owner may re-acquire")
	assert.Equal(t, "lost", c.Release(bg, "l", "c1", tok).Error, "with a fresh token; the old one is gone")
}

func TestPauseStallsUntilResume(t *testing.T) {
	n, c := startNode(t)
	n.Pause()
	done := make(chan fencing.Result, 1)
	go func() { done <- write(c, "k", 1, "late") }()
	select {
	case <-done:
		t.Fatal("a paused node answered")
	case <-time.After(100 * time.Millisecond):
	}
	ctx, cancel := context.WithTimeout(bg, 50*time.Millisecond)
	r := c.Read(ctx, "k")
	cancel()
	assert.Equal(t, fencing.Info, r.Outcome)
	n.Resume()
	r = <-done
	assert.Equal(t, fencing.Ok, r.Outcome)
	assert.Equal(t, "late", string(c.Read(bg, "k").Value))
}

func TestKillDropsInFlight(t *testing.T) {
	n, c := startNode(t)
	require.Equal(t, fencing.Ok, write(c, "k", 1, "v1").Outcome)
	n.Pause()
	done := make(chan fencing.Result, 1)
	go func() { done <- write(c, "k", 2, "in flight") }()
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, n.Kill())
	r := <-done
	assert.Equal(t, fencing.Info, r.Outcome, "%s", r.Error)
	assert.False(t, n.Running())
	// A killed node refuses connections: a definite failure.
	assert.Equal(t, fencing.Fail, write(c, "k", 3, "x").Outcome)
	restart(t, n, c, false)
	r = c.Read(bg, "k")
	require.Equal(t, fencing.Ok, r.Outcome)
	assert.Equal(t, "v1", string(r.Value), "the stalled write never reached the store")
}

func TestConcurrentClientsGroupCommit(t *testing.T) {
	n, c := startNode(t)
	const workers, each = 8, 15
	var mu sync.Mutex
	seen := map[uint64]bool{}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; i < each; i++ {
				lock := fmt.Sprintf("l%d", w%2)
				r := c.Acquire(bg, lock, fmt.Sprintf("c%d", w), time.Millisecond)
				if r.Outcome != fencing.Ok {
					continue
				}
				tok, _, _ := history.SplitToken(r.Token)
				mu.Lock()
				assert.False(t, seen[tok<<1|uint64(w%2)], "token %d issued twice on %s", tok, lock)
				seen[tok<<1|uint64(w%2)] = true
				mu.Unlock()
				write(c, lock, tok, fmt.Sprintf("c%d-%d", w, i))
			}
		}(w)
	}
	wg.Wait()
	restart(t, n, c, false)
	// Every acknowledged token is on disk: the counter resumes above them.
	for _, lock := range []string{"l0", "l1"} {
		max := uint64(0)
		for k := range seen {
			if k&1 == uint64(lock[1]-'0') && k>>1 > max {
				max = k >> 1
			}
		}
		time.Sleep(2 * time.Millisecond)
		assert.Greater(t, acquire(t, c, lock, "after"), max)
	}
}

func TestParseBugs(t *testing.T) {
	b, err := ParseBugs("accept-equal, no-fencing", "counter-in-memory")
	require.NoError(t, err)
	assert.True(t, b.Has(AcceptEqual))
	assert.True(t, b.Has(NoFencing))
	assert.True(t, b.Has(CounterInMemory))
	assert.False(t, b.Has(WallclockTokens))
	assert.Equal(t, "accept-equal,counter-in-memory,no-fencing", b.String())
	_, err = ParseBugs("accept-equal,nope")
	require.Error(t, err)
	for _, name := range AllBugs() {
		assert.Contains(t, err.Error(), string(name))
	}
	none, err := ParseBugs("")
	require.NoError(t, err)
	assert.Equal(t, fencing.ServerBugs{}, none.Server())
}

func TestServeStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(bg)
	errc := make(chan error, 1)
	go func() { errc <- Serve(ctx, Config{Dir: t.TempDir(), Addr: "127.0.0.1:0"}) }()
	time.Sleep(50 * time.Millisecond)
	cancel()
	select {
	case err := <-errc:
		assert.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return")
	}
}

func TestAcknowledgedSurvivesKills(t *testing.T) {
	n, c := startNode(t)
	stop := make(chan struct{})
	var mu sync.Mutex
	maxAcquired, maxWritten := uint64(0), uint64(0)
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ctx, cancel := context.WithTimeout(bg, 200*time.Millisecond)
				r := c.Acquire(ctx, "l", fmt.Sprintf("c%d", w), time.Millisecond)
				if r.Outcome == fencing.Ok {
					tok, _, _ := history.SplitToken(r.Token)
					mu.Lock()
					maxAcquired = max(maxAcquired, tok)
					mu.Unlock()
					if c.Write(ctx, "k", r.Token, []byte(fmt.Sprintf("c%d-%d", w, i))).Outcome == fencing.Ok {
						mu.Lock()
						maxWritten = max(maxWritten, tok)
						mu.Unlock()
					}
				}
				cancel()
			}
		}(w)
	}
	for i := 0; i < 5; i++ {
		time.Sleep(60 * time.Millisecond)
		require.NoError(t, n.Kill())
		time.Sleep(10 * time.Millisecond)
		require.NoError(t, n.Restart(false))
	}
	close(stop)
	wg.Wait()
	restart(t, n, c, false)
	require.Positive(t, maxWritten, "some writes got through between kills")
	time.Sleep(2 * time.Millisecond)
	assert.Greater(t, acquire(t, c, "l", "after"), maxAcquired, "no acknowledged token is reissued")
	r := write(c, "k", maxWritten, "replay")
	assert.Equal(t, "stale", r.Error, "no acknowledged write is forgotten")
}

func TestStopThenStartKeepsAddress(t *testing.T) {
	n, c := startNode(t)
	require.Equal(t, fencing.Ok, write(c, "k", 1, "v").Outcome)
	url := n.URL()
	require.NoError(t, n.Stop())
	assert.False(t, n.Running())
	got, err := n.Start("")
	require.NoError(t, err)
	assert.Equal(t, url, got)
	require.NoError(t, c.Health(bg))
	assert.Equal(t, "v", string(c.Read(bg, "k").Value))
}

// forget-idle-since-start: as forget-idle, but a restart starts every
// key's idle time again.
func TestBugForgetIdleSinceStart(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{Bugs: Bugs{ForgetIdleSinceStart: true}})
	require.NoError(t, err)
	require.NoError(t, s.Write(bg, "k", 2, []byte("a")))
	require.NoError(t, s.Write(bg, "m", 2, []byte("a")))
	s.mu.Lock()
	s.started -= int64(ForgetIdleAfter + time.Second)
	for _, key := range []string{"k", "m"} {
		r := s.keys[key]
		r.Written -= int64(ForgetIdleAfter + time.Second)
		s.keys[key] = r
	}
	s.version++
	s.mu.Unlock()
	require.NoError(t, s.Write(bg, "k", 1, []byte("late")), "idle since its write and the start: forgotten")
	require.NoError(t, s.Close())

	s, err = OpenStore(dir, StoreOptions{Bugs: Bugs{ForgetIdleSinceStart: true}})
	require.NoError(t, err)
	defer s.Close()
	var stale *fencing.StaleError
	assert.ErrorAs(t, s.Write(bg, "m", 1, []byte("late")), &stale, "idle before the restart only: the rebuilt timer holds the mark")
}

// forget-idle: a key without an accepted write for ForgetIdleAfter loses
// its mark (not its value); a key written since keeps it; the time of the
// last write is kept with the mark, through a restart.
func TestBugForgetIdle(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir, StoreOptions{Bugs: Bugs{ForgetIdle: true}})
	require.NoError(t, err)
	require.NoError(t, s.Write(bg, "k", 2, []byte("a")))
	require.NoError(t, s.Write(bg, "j", 2, []byte("a")))
	require.NoError(t, s.Write(bg, "m", 2, []byte("a")))
	var stale *fencing.StaleError
	assert.ErrorAs(t, s.Write(bg, "k", 1, []byte("b")), &stale, "written just now: the mark holds")
	age := func(s *Store, key string) {
		s.mu.Lock()
		r := s.keys[key]
		r.Written -= int64(ForgetIdleAfter + time.Second)
		s.keys[key] = r
		s.version++
		s.mu.Unlock()
	}
	age(s, "k")
	assert.NoError(t, s.Write(bg, "k", 1, []byte("late")), "idle: the mark is forgotten")
	assert.ErrorAs(t, s.Write(bg, "j", 1, []byte("b")), &stale)
	age(s, "m")
	require.NoError(t, s.Write(bg, "j", 3, []byte("c"))) // commits m's age too
	require.NoError(t, s.Close())

	s, err = OpenStore(dir, StoreOptions{Bugs: Bugs{ForgetIdle: true}})
	require.NoError(t, err)
	defer s.Close()
	assert.NoError(t, s.Write(bg, "m", 1, []byte("late")), "idle across the restart: forgotten")
	assert.ErrorAs(t, s.Write(bg, "j", 1, []byte("b")), &stale)
}
