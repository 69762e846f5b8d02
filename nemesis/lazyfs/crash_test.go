package lazyfs_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
)

// pages is n pages of byte c.
func pages(c byte, n int) []byte { return bytes.Repeat([]byte{c}, n*lazyfs.PageSize) }

// crashWith runs one power loss in state cs over a file of four durable
// pages of 'a', then unsynced: one write per page (b, c, d, e, in that
// order) when ops is "pages", one write over pages 1-3 of 'x' when "one",
// or four whole-file rewrites (each all one letter) when "seq"; plus an
// unsynced new file whose name was never made durable. It returns each
// page's letter as the disk (backing folder) holds it after the loss, and
// the loss.
func crashWith(t *testing.T, cs lazyfs.CrashState, ops string) (string, lazyfs.Loss) {
	t.Helper()
	m := mountT(t, false)
	path := filepath.Join(m.Dir(), "f")
	writeFile(t, path, string(pages('a', 4)), true)
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	require.NoError(t, err)
	switch ops {
	case "pages":
		for i, c := range []byte("bcde") {
			_, err = f.WriteAt(pages(c, 1), int64(i)*lazyfs.PageSize)
			require.NoError(t, err)
		}
	case "one":
		_, err = f.WriteAt(pages('x', 3), lazyfs.PageSize)
		require.NoError(t, err)
	case "seq":
		for _, c := range []byte("bcde") {
			_, err = f.WriteAt(pages(c, 4), 0)
			require.NoError(t, err)
		}
	}
	require.NoError(t, f.Close())
	writeFile(t, filepath.Join(m.Dir(), "new"), "never named on disk", false)
	loss, err := m.PowerLossAs(cs)
	require.NoError(t, err)
	_, found := content(t, filepath.Join(m.Backing(), "new"))
	assert.False(t, found, "a name never made durable is gone in every mode")
	b, err := os.ReadFile(filepath.Join(m.Backing(), "f"))
	require.NoError(t, err)
	got, _ := content(t, path)
	require.Equal(t, string(b), got, "the new mount shows the disk")
	require.Len(t, b, 4*lazyfs.PageSize, "no write changed the size")
	var letters strings.Builder
	for i := range 4 {
		pg := b[i*lazyfs.PageSize : (i+1)*lazyfs.PageSize]
		require.Equal(t, pages(pg[0], 1), pg, "page %d is one write's, whole", i)
		letters.WriteByte(pg[0])
	}
	return letters.String(), loss
}

// outcomes runs crashWith over seeds 1..n and counts each outcome; every
// seed is run twice and must leave the same disk (a replay).
func outcomes(t *testing.T, mode, ops string, n int) map[string]int {
	t.Helper()
	out := map[string]int{}
	for seed := uint64(1); seed <= uint64(n); seed++ {
		got, loss := crashWith(t, lazyfs.CrashState{Mode: mode, Seed: seed}, ops)
		again, _ := crashWith(t, lazyfs.CrashState{Mode: mode, Seed: seed}, ops)
		require.Equal(t, got, again, "%s seed %d replays", mode, seed)
		assert.Equal(t, 2, loss.Files, "f and new had unsynced data")
		out[got]++
	}
	t.Logf("%s over %q: %v", mode, ops, out)
	return out
}

func TestCrashLoseAllKeepsOnlyWhatWasSynced(t *testing.T) {
	got, loss := crashWith(t, lazyfs.CrashState{}, "pages")
	assert.Equal(t, "aaaa", got)
	assert.Zero(t, loss.Kept)
	got, _ = crashWith(t, lazyfs.CrashState{Mode: lazyfs.LoseAll, Seed: 9}, "one")
	assert.Equal(t, "aaaa", got)
}

// Written back oldest first: the pages on disk are always the first ones
// written, never a later one without every earlier one.
func TestCrashWritebackOrderedKeepsAPrefixOfTheWrites(t *testing.T) {
	allowed := map[string]bool{"aaaa": true, "baaa": true, "bcaa": true, "bcda": true, "bcde": true}
	seen := outcomes(t, lazyfs.WritebackOrdered, "pages", 12)
	for got := range seen {
		assert.True(t, allowed[got], "%s is not a prefix of the order the pages were written in", got)
	}
	assert.GreaterOrEqual(t, len(seen), 3, "the seed chooses how far writeback got")
}

// Written back in no order: some seed leaves a later page on disk while an
// earlier one is not.
func TestCrashWritebackAnyKeepsPagesOutOfOrder(t *testing.T) {
	seen := outcomes(t, lazyfs.WritebackAny, "pages", 12)
	outOfOrder := false
	for got := range seen {
		for i, c := range got {
			assert.True(t, c == 'a' || c == rune("bcde"[i]), "page %d of %s is its own write's or the old one", i, got)
		}
		// An old page before a new one: a later write is on disk and an
		// earlier one is not.
		if i := strings.IndexByte(got, 'a'); i >= 0 && strings.TrimLeft(got[i:], "a") != "" {
			outOfOrder = true
		}
	}
	assert.True(t, outOfOrder, "no seed kept a later page without an earlier one: %v", seen)
}

// Torn: one write of three pages is on disk in part, never whole or not at
// all.
func TestCrashTornOpKeepsPartOfTheLastWrite(t *testing.T) {
	seen := outcomes(t, lazyfs.TornOp, "one", 10)
	for got := range seen {
		assert.Equal(t, byte('a'), got[0], "page 0 was not written")
		n := strings.Count(got, "x")
		assert.True(t, n >= 1 && n <= 2, "%s: a torn write keeps 1 or 2 of its 3 pages", got)
	}
	assert.GreaterOrEqual(t, len(seen), 2)
}

// Torn sequence: of the last writes, each is on disk whole or not at all,
// and which is seeded; the disk holds the newest kept one (or the old data).
func TestCrashTornSeqKeepsWholeWritesOfTheLastOnes(t *testing.T) {
	seen := outcomes(t, lazyfs.TornSeq, "seq", 12)
	for got := range seen {
		assert.Contains(t, []string{"aaaa", "bbbb", "cccc", "dddd", "eeee"}, got, "each write is whole or absent")
	}
	assert.GreaterOrEqual(t, len(seen), 3, "the seed chooses which writes of the sequence")
}

// Size changes are kept or dropped as writes are: a file truncated to
// nothing and rewritten shorter (os.WriteFile's way) may come back empty,
// short, or as it was on disk.
func TestCrashSizeChangesAreOperationsToo(t *testing.T) {
	seen := map[string]int{}
	for seed := uint64(1); seed <= 16; seed++ {
		m := mountT(t, false)
		path := filepath.Join(m.Dir(), "state")
		writeFile(t, path, "old durable state, long", true)
		writeFile(t, path, "new", false) // truncate, then write
		_, err := m.PowerLossAs(lazyfs.CrashState{Mode: lazyfs.WritebackAny, Seed: seed})
		require.NoError(t, err)
		got, _ := content(t, filepath.Join(m.Backing(), "state"))
		seen[got]++
	}
	t.Logf("%v", seen)
	for got := range seen {
		assert.Contains(t, []string{"old durable state, long", "", "new", "new durable state, long"}, got)
	}
	assert.Contains(t, seen, "", "the truncation alone is on disk for some seed")
	assert.Contains(t, seen, "old durable state, long")
}

func TestCrashStateIsChecked(t *testing.T) {
	m := mountT(t, false)
	_, err := m.PowerLossAs(lazyfs.CrashState{Mode: "melt"})
	assert.ErrorContains(t, err, "melt")
	assert.NoError(t, lazyfs.CrashState{}.Check())
}
