package fencing

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestClientAgainstServer(t *testing.T) {
	ts := httptest.NewServer(NewServer(newFakeStore(), ServerOptions{}))
	defer ts.Close()
	c := NewClient(ts.URL, nil)
	ctx := context.Background()

	r := c.Acquire(ctx, "r1", "c7", 2*time.Second)
	require.Equal(t, Ok, r.Outcome, r.Message)
	assert.Equal(t, "1", r.Token)
	assert.Equal(t, 2*time.Second, r.TTL)

	r = c.Acquire(ctx, "r1", "c8", time.Second)
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, "held", r.Error)
	assert.Equal(t, 409, r.Status)

	assert.Equal(t, Ok, c.Renew(ctx, "r1", "c7", "1", time.Second).Outcome)
	r = c.Renew(ctx, "r1", "c8", "1", time.Second)
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, "lost", r.Error)

	r = c.Read(ctx, "r1")
	assert.Equal(t, Ok, r.Outcome)
	assert.False(t, r.Found)

	require.Equal(t, Ok, c.Write(ctx, "r1", "5", []byte("c7-1")).Outcome)
	r = c.Write(ctx, "r1", "4", []byte("c7-2"))
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, "stale", r.Error)
	assert.Equal(t, "5", r.HighWater)

	r = c.Write(ctx, "r1", "", []byte("c7-3"))
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, 428, r.Status)
	assert.Equal(t, "missing-token", r.Error)

	r = c.Write(ctx, "r1", "x", []byte("c7-4"))
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, 400, r.Status)

	r = c.Read(ctx, "r1")
	require.Equal(t, Ok, r.Outcome)
	assert.True(t, r.Found)
	assert.Equal(t, "c7-1", string(r.Value))
	assert.Equal(t, "5", r.Token)

	assert.Equal(t, Ok, c.Release(ctx, "r1", "c7", "1").Outcome)
	assert.Equal(t, Fail, c.Release(ctx, "r1", "c7", "1").Outcome)
	assert.NoError(t, c.Health(ctx))
}

func TestClientClassification(t *testing.T) {
	mux := http.NewServeMux()
	stall := make(chan struct{})
	defer close(stall)
	mux.HandleFunc("/v1/resources/slow", func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body) // so the server notices the client hanging up
		select {
		case <-stall:
		case <-r.Context().Done():
		}
	})
	mux.HandleFunc("/v1/resources/5xx", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 503, "unavailable", "backend down")
	})
	mux.HandleFunc("/v1/resources/500plain", func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "boom", 500)
	})
	mux.HandleFunc("/v1/resources/reset", func(w http.ResponseWriter, r *http.Request) {
		// The server read the request (it may have acted) and then the
		// connection died: the outcome is unknown.
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.(*net.TCPConn).SetLinger(0)
			conn.Close()
		}
	})
	mux.HandleFunc("/v1/resources/teapot", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})
	mux.HandleFunc("/v1/resources/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/elsewhere", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/v1/resources/forged", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 403, "forged", "no")
	})
	mux.HandleFunc("/v1/resources/large", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, 413, "too-large", "no")
	})
	mux.HandleFunc("/v1/locks/l/acquire", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.Write([]byte("not json"))
	})
	mux.HandleFunc("/v1/resources/notoken", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("value without its token"))
	})
	ts := httptest.NewServer(mux)
	defer ts.Close()
	c := NewClient(ts.URL, nil)

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	r := c.Write(ctx, "slow", "1", []byte("v"))
	assert.Equal(t, Info, r.Outcome, "a write that timed out may still land")
	assert.Equal(t, ErrWordTimeout, r.Error)

	ctx2, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	r = c.Acquire(ctx2, "slowlock", "c", time.Second)
	assert.Equal(t, Fail, r.Outcome, "mux 404 for a lock op: no such endpoint, nothing happened")

	bg := context.Background()
	r = c.Write(bg, "5xx", "1", []byte("v"))
	assert.Equal(t, Info, r.Outcome)
	assert.Equal(t, 503, r.Status)
	assert.Equal(t, "unavailable", r.Error)

	r = c.Write(bg, "500plain", "1", []byte("v"))
	assert.Equal(t, Info, r.Outcome)
	assert.Equal(t, ErrWordUnexpected, r.Error)

	r = c.Write(bg, "reset", "1", []byte("v"))
	assert.Equal(t, Info, r.Outcome, "a reset write may have landed")
	assert.Equal(t, ErrWordConnection, r.Error)

	assert.Equal(t, Info, c.Write(bg, "teapot", "1", []byte("v")).Outcome)
	assert.Equal(t, Info, c.Write(bg, "redirect", "1", []byte("v")).Outcome)
	assert.Equal(t, Fail, c.Write(bg, "forged", "1", []byte("v")).Outcome)
	assert.Equal(t, Fail, c.Write(bg, "large", "1", []byte("v")).Outcome)

	r = c.Acquire(bg, "l", "c", time.Second)
	assert.Equal(t, Info, r.Outcome, "a 200 acquire we cannot decode may still hold the lock")
	assert.Equal(t, ErrWordBadResponse, r.Error)

	assert.Equal(t, Info, c.Read(bg, "notoken").Outcome)
	assert.Equal(t, Info, c.Read(bg, "5xx").Outcome)

	// Nobody listening: the dial failed, so the request never left.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	r = NewClient("http://"+addr, nil).Write(bg, "k", "1", []byte("v"))
	assert.Equal(t, Fail, r.Outcome)
	assert.Equal(t, ErrWordRefused, r.Error)
}

func TestClientKeepAlive(t *testing.T) {
	conns := 0
	ts := httptest.NewUnstartedServer(NewServer(newFakeStore(), ServerOptions{}))
	ts.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns++
		}
	}
	ts.Start()
	defer ts.Close()
	c := NewClient(ts.URL, nil)
	for i := 1; i <= 20; i++ {
		c.Write(context.Background(), "k", history.FormatToken(uint64(i)), []byte("v"))
		c.Write(context.Background(), "k", "0", []byte("stale"))
		c.Read(context.Background(), "k")
	}
	assert.Equal(t, 1, conns, "sequential calls reuse one connection")
}
