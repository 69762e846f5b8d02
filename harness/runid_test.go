package harness

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Two runs started in the same millisecond into different stores have the
// same folder name; their ids (what their containers, networks and
// teardowns go by) still differ, and are valid Docker names.
func TestRunIDsAreUniqueAcrossProcessesAndStores(t *testing.T) {
	seen := map[string]bool{}
	for i := 0; i < 1000; i++ {
		id := NewRunID("spec:/x/y.json", "/store"+string(rune('a'+i%2))+"/spec-_x_y.json/20261201T100000.000Z")
		assert.Regexp(t, regexp.MustCompile(`^spec-_x_y\.json-20261201T100000\.000Z-[0-9a-f]{8}$`), id)
		assert.False(t, seen[id], "id %s drawn twice", id)
		seen[id] = true
	}
}
