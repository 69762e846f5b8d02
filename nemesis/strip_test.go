package nemesis

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestLinkNemesesNeedClientLinks(t *testing.T) {
	for _, n := range []Nemesis{strip{}, delay{}} {
		ok, why := n.Applicable(&Env{})
		assert.False(t, ok, n.Name())
		assert.Contains(t, why, "no proxies between clients and nodes")
	}
	ok, why := (&partition{}).Applicable(&Env{Target: noNodes{}})
	assert.False(t, ok)
	assert.Contains(t, why, "cannot partition")

	f := newLinkFixture(t)
	for _, n := range []Nemesis{strip{}, delay{}, &partition{}} {
		ok, why := n.Applicable(&Env{Links: f.set})
		assert.True(t, ok, "%s: %s", n.Name(), why)
	}
}

func TestStripTampersWithAShareOfWritesUntilStopped(t *testing.T) {
	f := newLinkFixture(t)
	env := &Env{Links: f.set}
	fault, err := drawStart(context.Background(), strip{}, env, rand.New(rand.NewPCG(1, 2)))
	require.NoError(t, err)
	share := fault.Details["share"].(float64)
	assert.GreaterOrEqual(t, share, 0.3)
	assert.LessOrEqual(t, share, 0.7)
	assert.Equal(t, []string{"clients->n1"}, fault.Details["links"], "only client links")
	assert.Equal(t, []string{"n1"}, fault.Nodes)

	rejected := 0
	for i := range 100 {
		code, err := putToken(context.Background(), f.url, "k", fmt.Sprint(i+1), fmt.Sprintf("v%d", i))
		require.NoError(t, err)
		if code != http.StatusNoContent && code != http.StatusConflict {
			rejected++
		}
	}
	st, _ := f.set.Stats("clients->n1")
	assert.Positive(t, st.Stripped)
	assert.Equal(t, int(st.Stripped), rejected, "a strict resource rejects every stripped write")
	strips := 0
	for _, e := range f.hist.events(t) {
		if e.F == "strip" {
			strips++
		}
	}
	assert.Equal(t, int(st.Stripped), strips, "every tampering is in the history")

	require.NoError(t, fault.Stop(context.Background()))
	for i := range 20 {
		code, err := putToken(context.Background(), f.url, "k", fmt.Sprint(1000+i), "after")
		require.NoError(t, err)
		assert.Equal(t, http.StatusNoContent, code)
	}

	_, err = drawStart(context.Background(), strip{}, env, rand.New(rand.NewPCG(1, 3)))
	require.NoError(t, err)
	require.NoError(t, strip{}.Heal(context.Background(), env))
	code, err := putToken(context.Background(), f.url, "k", "5000", "healed")
	require.NoError(t, err)
	assert.Equal(t, http.StatusNoContent, code)
}
