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
		{`{"index":0,"time":1,"process":0,"type":"ok","key":"k"}`, `missing "f"`},
		{`{"index":0,"time":1,"process":-2,"type":"ok","f":"write","key":"k"}`, "process -2: clients are 0 or more"},
		{`{"index":0,"time":1,"process":-1,"type":"ok","f":"write","key":"k"}`, "client operation \"write\" with the nemesis's process -1"},
		{`{"index":0,"time":1,"process":0,"type":"ok","f":"write"}`, "write without a key"},
		{`[1,2]`, "not a JSON event"},
		// issue 12: each was silently read as a zero, or dropped.
		{`{"time":1,"process":0,"type":"invoke","f":"read","key":"k"}`, `missing "index"`},
		{`{"index":0,"process":0,"type":"invoke","f":"read","key":"k"}`, `missing "time"`},
		{`{"index":0,"time":1,"type":"invoke","f":"read","key":"k"}`, `missing "process"`},
		{`{"index":0,"time":1,"process":0,"f":"read","key":"k"}`, `missing "type"`},
		{`{"index":0,"time":1,"process":0,"type":"invoke","f":"wirte","key":"k"}`, `f "wirte" of process 0 is not a client operation`},
		{`{"index":"0","time":1,"process":0,"type":"invoke","f":"read","key":"k"}`, `"index" must be int64`},
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

// issue 12: a byte-order mark at the start is read past, not refused.
func TestReaderSkipsByteOrderMark(t *testing.T) {
	in := "\xef\xbb\xbf" + `{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}` + "\n"
	evs, err := ReadAll(strings.NewReader(in))
	require.NoError(t, err)
	require.Len(t, evs, 1)
	assert.Equal(t, "read", evs[0].F)
}

// issue 12: what a history must not contain is refused, naming the line.
func TestPairerRefuses(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"completion before invoke", `{"index":0,"time":5,"process":0,"type":"invoke","f":"read","key":"k"}
{"index":1,"time":4,"process":0,"type":"ok","f":"read","key":"k"}`, "before its invoke"},
		{"duplicate index", `{"index":0,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}
{"index":0,"time":2,"process":0,"type":"ok","f":"read","key":"k"}`, "duplicate index 0"},
		{"duplicate sparse index", `{"index":9000000000,"time":1,"process":0,"type":"invoke","f":"read","key":"k"}
{"index":9000000000,"time":2,"process":0,"type":"ok","f":"read","key":"k"}`, "duplicate index 9000000000"},
		{"strip of no write", `{"index":0,"time":1,"process":-1,"type":"info","f":"strip","key":"k","value":"v","token":""}`, "matches no write"},
		{"token differs", `{"index":0,"time":1,"process":0,"type":"invoke","f":"write","key":"k","token":"1","value":"v"}
{"index":1,"time":2,"process":0,"type":"ok","f":"write","key":"k","token":"2","value":"v"}`, "differs from its invoke's"},
	} {
		evs, err := ReadAll(strings.NewReader(c.in + "\n"))
		require.NoError(t, err, c.name)
		_, err = Pair(evs)
		require.Error(t, err, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
	}
}

// issue 12: a write whose token and value are only on its completion (as
// Jepsen-style tools write them) is read with them.
func TestPairerTokenAndValueOnCompletion(t *testing.T) {
	in := `{"index":0,"time":1,"process":0,"type":"invoke","f":"write","key":"k"}
{"index":1,"time":2,"process":0,"type":"ok","f":"write","key":"k","token":"3","value":"v"}
`
	evs, err := ReadAll(strings.NewReader(in))
	require.NoError(t, err)
	ops, err := Pair(evs)
	require.NoError(t, err)
	require.Len(t, ops, 1)
	assert.Equal(t, uint64(3), ops[0].Token.N)
	assert.Equal(t, TokenValid, ops[0].Token.State)
	assert.Equal(t, "v", ops[0].Value)
}

// issue 12: strip events are matched to writes by key and value.
func TestPairerStripMatchesKeyAndValue(t *testing.T) {
	in := `{"index":0,"time":1,"process":0,"type":"invoke","f":"write","key":"a","token":"1","value":"v"}
{"index":1,"time":1,"process":1,"type":"invoke","f":"write","key":"b","token":"1","value":"v"}
{"index":2,"time":2,"process":-1,"type":"info","f":"strip","key":"b","value":"v","token":"","extra":{"mode":"remove"}}
{"index":3,"time":3,"process":0,"type":"ok","f":"write","key":"a"}
{"index":4,"time":3,"process":1,"type":"fail","f":"write","key":"b","error":"missing-token"}
`
	evs, err := ReadAll(strings.NewReader(in))
	require.NoError(t, err)
	ops, err := Pair(evs)
	require.NoError(t, err)
	require.Len(t, ops, 2)
	for _, op := range ops {
		if op.Key == "a" {
			assert.Equal(t, TokenValid, op.Token.State)
			assert.Empty(t, op.Tampered)
		} else {
			assert.Equal(t, TokenNone, op.Token.State)
			assert.Equal(t, "remove", op.Tampered)
		}
	}
}

// issue 12: the recorder writes no HTML escapes, and the reader takes the
// longest line the recorder can write for a legal (1 MiB) value.
func TestRecorderRoundTripLargeValues(t *testing.T) {
	mixed := make([]byte, MaxValue)
	const alphabet = "<>&\x00\x01\x1f\x7f"
	for i := range mixed {
		mixed[i] = alphabet[i%len(alphabet)]
	}
	values := []string{strings.Repeat("<", MaxValue), string(mixed), strings.Repeat("\x01", MaxValue)}
	var buf bytes.Buffer
	rec := NewRecorder(&buf)
	for _, v := range values {
		rec.Record(Event{Process: 0, Type: Invoke, F: Read, Key: "k"})
		rec.Record(Event{Process: 0, Type: Ok, F: Read, Key: "k", Token: "1", Value: v})
	}
	require.NoError(t, rec.Close())
	assert.NotContains(t, buf.String(), `\u003c`)
	evs, err := ReadAll(bytes.NewReader(buf.Bytes()))
	require.NoError(t, err)
	require.Len(t, evs, 2*len(values))
	for i, v := range values {
		assert.Equal(t, v, evs[2*i+1].Value)
	}
}
