package history

import (
	"bytes"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecorderStampsAndFlushesEveryEvent(t *testing.T) {
	var buf bytes.Buffer
	r := NewRecorder(&buf)
	a := r.Record(Event{Process: 0, Type: Invoke, F: Write, Key: "k", Token: "1", Value: "v1"})
	// Flushed before Record returns: a crash now loses nothing recorded.
	require.Contains(t, buf.String(), `"value":"v1"`)
	b := r.Record(Event{Process: 0, Type: Ok, F: Write, Key: "k", Token: "1", Value: "v1"})
	assert.Equal(t, int64(0), a.Index)
	assert.Equal(t, int64(1), b.Index)
	assert.LessOrEqual(t, a.Time, b.Time)
	events, err := ReadAll(&buf)
	require.NoError(t, err)
	require.Len(t, events, 2)
	assert.Equal(t, b, events[1])
}

func TestReaderNamesTheBadLine(t *testing.T) {
	in := `{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}

{"index":1,"time":2,"process":0,"type":"maybe","f":"read","key":"k"}
`
	_, err := ReadAll(strings.NewReader(in))
	var pe *ParseError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, 3, pe.Line)
	assert.Contains(t, err.Error(), `type "maybe"`)

	for _, c := range []struct{ line, want string }{
		{`{"index":0,"process":0,"type":"ok","key":"k"}`, `missing "f"`},
		{`{"index":0,"process":-2,"type":"ok","f":"write","key":"k"}`, "negative process"},
		{`{"index":0,"process":0,"type":"ok","f":"write"}`, "write without a key"},
		{`[1,2]`, "not a JSON event"},
	} {
		_, err := ReadAll(strings.NewReader(c.line + "\n" + c.line + "\n"))
		require.Error(t, err, c.line)
		assert.Contains(t, err.Error(), "history line 1: ")
		assert.Contains(t, err.Error(), c.want)
	}
}

func TestNemesisEventsAreCarriedThrough(t *testing.T) {
	in := `{"index":0,"time":1,"process":-1,"type":"info","f":"partition","node":"n1","extra":{"action":"start","groups":[["n1"],["n2"]]}}` + "\n"
	events, err := ReadAll(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, events, 1)
	assert.False(t, events[0].IsClient())
	assert.JSONEq(t, `[["n1"],["n2"]]`, string(events[0].Extra["groups"]))
}

func TestTruncatedLastLineIsSkippedNotFatal(t *testing.T) {
	in := `{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n" + `{"index":1,"time":2,"proc`
	rd := NewReader(strings.NewReader(in))
	_, err := rd.Next()
	require.NoError(t, err)
	_, err = rd.Next()
	assert.Equal(t, io.EOF, err)
	assert.True(t, rd.Truncated)

	// The same damage in the middle of a file is an error.
	_, err = ReadAll(strings.NewReader(`{"index":1,"time":2,"proc` + "\n" + `{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n"))
	require.Error(t, err)
}

// Begin puts the first event at time 0, whatever setup came before, and
// refuses once the history has events.
func TestBeginStartsTheClock(t *testing.T) {
	var buf bytes.Buffer
	rec := NewRecorder(&buf)
	time.Sleep(50 * time.Millisecond)
	first, err := rec.Begin(Event{Process: NemesisProcess, Type: Info, F: RunEvent})
	require.NoError(t, err)
	assert.Zero(t, first.Index)
	assert.Zero(t, first.Time, "setup before Begin is not counted")
	assert.True(t, first.IsRun())
	rec.Record(Event{Process: 0, Type: Invoke, F: Read, Key: "k"})
	_, err = rec.Begin(Event{Process: NemesisProcess, Type: Info, F: RunEvent})
	assert.Error(t, err)
}
