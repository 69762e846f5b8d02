package main

import (
	"bytes"
	"io"
	"testing"

	"github.com/stretchr/testify/assert"
)

// The rules themselves are tested in package nemesis/netcut (in a network
// namespace of the test's own) and through helper containers in
// harness/docker; here, the command line.
func TestUsage(t *testing.T) {
	var stderr bytes.Buffer
	assert.Equal(t, 64, run(nil, nil, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), "usage: netcut serve")
	assert.Equal(t, 64, run([]string{"cut"}, nil, io.Discard, io.Discard))
	assert.Equal(t, 64, run([]string{"serve", "extra"}, nil, io.Discard, io.Discard))
	stderr.Reset()
	assert.Equal(t, 64, run([]string{"drop", "10.0.0.1", "nowhere"}, nil, io.Discard, &stderr))
	assert.Contains(t, stderr.String(), `peer "nowhere" is not an IP address`)
	assert.Equal(t, 64, run([]string{"drop", "fe80::1"}, nil, io.Discard, io.Discard), "IPv6 is refused")
}
