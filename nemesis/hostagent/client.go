package hostagent

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
)

// Client is the controller's side of one agent: requests over the agent's
// standard input, answers from its standard output, and a renewal of the
// lease every second while the client is open.
type Client struct {
	w   io.WriteCloser
	wmu sync.Mutex

	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan Response
	err     error // set once the agent's output ended
	done    chan struct{}
	stop    chan struct{}
	closed  bool
}

// RenewEvery is how often a client renews its agent's lease: a fifth of
// the default lease, so that a slow link or a busy controller has room.
const RenewEvery = time.Second

// NewClient speaks to an agent whose input is w and whose output is r.
func NewClient(r io.Reader, w io.WriteCloser) *Client {
	c := &Client{w: w, pending: map[uint64]chan Response{}, done: make(chan struct{}), stop: make(chan struct{})}
	go c.read(r)
	go c.renew()
	return c
}

func (c *Client) read(r io.Reader) {
	in := bufio.NewScanner(r)
	in.Buffer(make([]byte, 64<<10), 4<<20)
	for in.Scan() {
		var resp Response
		if err := json.Unmarshal(in.Bytes(), &resp); err != nil {
			continue // not an answer (a banner a login script printed)
		}
		c.mu.Lock()
		ch := c.pending[resp.ID]
		delete(c.pending, resp.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- resp
		}
	}
	err := in.Err()
	if err == nil {
		err = io.EOF
	}
	c.mu.Lock()
	c.err = fmt.Errorf("the host agent's connection ended: %w", err)
	for id, ch := range c.pending {
		close(ch)
		delete(c.pending, id)
	}
	c.mu.Unlock()
	close(c.done)
}

func (c *Client) renew() {
	t := time.NewTicker(RenewEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			_ = c.send(Request{Op: OpRenew})
		case <-c.stop:
			return
		case <-c.done:
			return
		}
	}
}

func (c *Client) send(req Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// Done is closed once the agent's output ended (the agent exited or the
// connection was lost).
func (c *Client) Done() <-chan struct{} { return c.done }

// Err says why the agent is gone (nil while it answers).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Call sends one request and waits for its answer; an answer with an
// error is returned as that error.
func (c *Client) Call(ctx context.Context, req Request) (Response, error) {
	ch := make(chan Response, 1)
	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return Response{}, err
	}
	c.next++
	req.ID = c.next
	c.pending[req.ID] = ch
	c.mu.Unlock()
	if err := c.send(req); err != nil {
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return Response{}, fmt.Errorf("sending %s to the host agent: %w", req.Op, err)
	}
	select {
	case resp, ok := <-ch:
		if !ok {
			return Response{}, c.Err()
		}
		if resp.Error != "" {
			return resp, errors.New(resp.Error)
		}
		return resp, nil
	case <-ctx.Done():
		c.mu.Lock()
		delete(c.pending, req.ID)
		c.mu.Unlock()
		return Response{}, fmt.Errorf("%s on the host agent: %w", req.Op, ctx.Err())
	}
}

// Bye asks the agent to heal, stop, remove its folder and exit, and waits
// for it to be gone.
func (c *Client) Bye(ctx context.Context) error {
	_, err := c.Call(ctx, Request{Op: OpBye})
	if err == nil {
		select {
		case <-c.done:
		case <-ctx.Done():
		}
	}
	return err
}

// Close stops the renewals and closes the agent's input: an agent that
// was not told bye then heals and exits on its own.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()
	close(c.stop)
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.w.Close()
}
