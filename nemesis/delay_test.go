package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/proxy"
)

func TestDelayHoldsWritesUntilANewerTokenThenStops(t *testing.T) {
	f := newLinkFixture(t)
	env := &Env{Links: f.set, TTL: 2 * time.Second}
	fault, err := drawStart(context.Background(), delay{}, env, rand.New(rand.NewPCG(5, 5)))
	require.NoError(t, err)
	bound := time.Duration(fault.Details["bound_ms"].(int64)) * time.Millisecond
	assert.GreaterOrEqual(t, bound, env.TTL)
	assert.LessOrEqual(t, bound, 3*env.TTL)

	// Many writers with small tokens: some are held. Then a newer token
	// arrives over the node-to-node link (not delayed) and releases them:
	// they arrive late and a strict resource rejects them as stale.
	var wg sync.WaitGroup
	codes := make([]int, 20)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i], _ = putToken(context.Background(), f.url, fmt.Sprintf("k%d", i), "1", fmt.Sprintf("old%d", i))
		}()
	}
	// Wait until every write reached the proxy (held) or the resource
	// (passed): a loaded machine may take a while to run 20 goroutines.
	var st proxy.Stats
	require.Eventually(t, func() bool {
		st, _ = f.set.Stats("clients->n1")
		return int(st.Delayed)+len(f.res.arrived()) == 20
	}, 10*time.Second, 10*time.Millisecond, "every write reached the proxy")
	require.Positive(t, st.Delayed, "some writes are held")
	held := int(st.Delayed)
	assert.Len(t, f.res.arrived(), 20-held)

	start := time.Now()
	for i := range codes {
		code, err := putToken(context.Background(), f.set.Links()[1].URL, fmt.Sprintf("k%d", i), "2", fmt.Sprintf("new%d", i))
		require.NoError(t, err)
		_ = code
	}
	wg.Wait()
	assert.Less(t, time.Since(start), bound, "released by the newer tokens, not the bound")
	stale := 0
	for _, c := range codes {
		if c == http.StatusConflict {
			stale++
		}
	}
	assert.Equal(t, held, stale, "every held write arrived after the newer token")
	st, _ = f.set.Stats("clients->n1")
	assert.EqualValues(t, held, st.Overtaken)

	require.NoError(t, fault.Stop(context.Background()))
	before, _ := f.set.Stats("clients->n1")
	for i := range 20 {
		_, err := putToken(context.Background(), f.url, "z", fmt.Sprint(i+1), "after")
		require.NoError(t, err)
	}
	after, _ := f.set.Stats("clients->n1")
	assert.Equal(t, before.Delayed, after.Delayed, "no delay after stop")
	require.NoError(t, delay{}.Heal(context.Background(), env))
}
