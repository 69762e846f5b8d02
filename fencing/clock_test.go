package fencing

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func near(t *testing.T, want, got time.Time) {
	t.Helper()
	assert.WithinDuration(t, want, got, time.Second)
}

func TestOffsetClock(t *testing.T) {
	var c OffsetClock
	near(t, time.Now(), c.Now())
	c.Set(time.Hour)
	assert.Equal(t, time.Hour, c.Offset())
	near(t, time.Now().Add(time.Hour), c.Now())
	c.Set(-2 * time.Minute)
	near(t, time.Now().Add(-2*time.Minute), c.Now())
	// Concurrent use is safe (run with -race to see it).
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				c.Set(time.Duration(i) * time.Second)
				c.Now()
			}
		}(i)
	}
	wg.Wait()
}

func TestFileOffsetClock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	c := FileOffsetClock(path)
	assert.Equal(t, time.Duration(0), c.Offset(), "no file, no offset")

	require.NoError(t, WriteClockOffset(path, 90*time.Second))
	require.Eventually(t, func() bool { return c.Now().Sub(time.Now()) > 80*time.Second }, time.Second, time.Millisecond)
	assert.Equal(t, 90*time.Second, c.Offset())

	require.NoError(t, os.WriteFile(path, []byte(" -1500000000\n"), 0o644))
	require.Eventually(t, func() bool { c.Now(); return c.Offset() == -1500*time.Millisecond }, time.Second, time.Millisecond)

	require.NoError(t, os.WriteFile(path, []byte("-30s"), 0o644))
	require.Eventually(t, func() bool { c.Now(); return c.Offset() == -30*time.Second }, time.Second, time.Millisecond)

	// Half-written garbage keeps the previous offset.
	require.NoError(t, os.WriteFile(path, []byte("12ab"), 0o644))
	time.Sleep(3 * ClockFileRefresh)
	c.Now()
	assert.Equal(t, -30*time.Second, c.Offset())

	require.NoError(t, os.Remove(path))
	require.Eventually(t, func() bool { c.Now(); return c.Offset() == 0 }, time.Second, time.Millisecond)
}

func TestParseClockOffset(t *testing.T) {
	for in, want := range map[string]time.Duration{"0": 0, "+5": 5, "-7\n": -7, "1m": time.Minute, " -2h ": -2 * time.Hour} {
		got, ok := ParseClockOffset(in)
		assert.True(t, ok, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "x", "1.5.5"} {
		_, ok := ParseClockOffset(in)
		assert.False(t, ok, in)
	}
}
