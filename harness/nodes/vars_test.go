package nodes

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSubstitute(t *testing.T) {
	vars := map[string]string{"port": "7001", "data": "/d", "addr:n2": "127.0.0.1:7002", "addr:n2:peer": "127.0.0.1:7003"}
	assert.Equal(t, "127.0.0.1:7001", Substitute("127.0.0.1:{port}", vars))
	assert.Equal(t, "--peer=127.0.0.1:7002", Substitute("--peer={addr:n2}", vars))
	assert.Equal(t, "--peer=127.0.0.1:7003", Substitute("--peer={addr:n2:peer}", vars))
	assert.Equal(t, `{"a":1}`, Substitute(`{"a":1}`, vars), "JSON in an argument is not a placeholder")
	assert.Equal(t, "{dta}", Substitute("{dta}", vars), "an unknown placeholder stays as it is")
	assert.Equal(t, []Placeholder{{"port", ""}, {"addr", "n2:peer"}}, Placeholders("{port} {addr:n2:peer}"))
}
