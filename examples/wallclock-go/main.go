// wallclock-fence is a small Fencing API v1 server whose tokens are the
// wall clock in milliseconds, the way many ID generators work: a token is
// time.Now().UnixMilli(), and a second acquire within the same millisecond
// waits for the next one, so that two tokens are never equal. Everything
// else is done right (durable high-water marks, strict checks), and it
// passes fencecheck's conformance preflight. It is wrong all the same:
// when the machine's clock steps back, tokens go back with it.
//
// It is an example of a user's system, not part of fencecheck: it reads
// the real clock and knows nothing of fencecheck's clock faults, which move
// its clock from outside.
//
// Usage: go run . --port PORT --data DIR
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"
)

var (
	nameRe  = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)
	tokenRe = regexp.MustCompile(`^(0|[1-9][0-9]{0,19})(?:\.[A-Za-z0-9_-]{1,256})?$`)
)

const maxBody = 1 << 20

type lease struct {
	owner   string
	token   uint64
	expires time.Time
}

type resource struct {
	HighWater uint64 `json:"high_water"`
	Token     uint64 `json:"token"`
	Value     []byte `json:"value"`
}

type server struct {
	dir       string
	mu        sync.Mutex
	lastToken uint64
	leases    map[string]lease
	resources map[string]*resource
}

// nextToken is the wall clock in milliseconds, never equal to the last
// token handed out (it waits for the next millisecond). It does not check
// that the clock went forward: that is the bug.
func (s *server) nextToken() uint64 {
	for {
		t := uint64(time.Now().UnixMilli())
		if t != s.lastToken {
			s.lastToken = t
			return t
		}
		time.Sleep(100 * time.Microsecond)
	}
}

type apiError struct {
	status    int
	word, msg string
	highWater string
}

func (e *apiError) Error() string { return e.msg }

func fail(status int, word, format string, args ...any) *apiError {
	return &apiError{status: status, word: word, msg: fmt.Sprintf(format, args...)}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	var e *apiError
	if !errors.As(err, &e) {
		e = &apiError{status: 500, word: "internal", msg: err.Error()}
	}
	body := map[string]string{"error": e.word, "message": e.msg}
	if e.highWater != "" {
		body["high_water"] = e.highWater
	}
	writeJSON(w, e.status, body)
}

func parseToken(s string) (uint64, error) {
	if s == "" {
		return 0, fail(428, "missing-token", "a token is required")
	}
	m := tokenRe.FindStringSubmatch(s)
	if m == nil {
		return 0, fail(400, "malformed-token", "token %q is not a decimal uint64", s)
	}
	n, err := strconv.ParseUint(m[1], 10, 64)
	if err != nil {
		return 0, fail(400, "malformed-token", "token %q is out of range", s)
	}
	return n, nil
}

func validName(s string) bool { return nameRe.MatchString(s) && s != "." && s != ".." }

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		writeError(w, fail(413, "too-large", "body over 1 MiB"))
		return
	}
	parts := strings.Split(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case r.URL.Path == "/v1/health":
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET")
			writeError(w, fail(405, "method-not-allowed", "use GET"))
			return
		}
		writeJSON(w, 200, map[string]string{"status": "ok", "api": "v1"})
	case len(parts) == 4 && parts[0] == "v1" && parts[1] == "locks":
		s.lock(w, r, parts[2], parts[3], body)
	case len(parts) == 3 && parts[0] == "v1" && parts[1] == "resources":
		s.resource(w, r, parts[2], body)
	case strings.HasPrefix(r.URL.Path, "/v1/locks/") || strings.HasPrefix(r.URL.Path, "/v1/resources/"):
		writeError(w, fail(400, "bad-name", "names match [A-Za-z0-9._-]{1,128}"))
	default:
		writeError(w, fail(404, "no-route", "no such endpoint: %s", r.URL.Path))
	}
}

func (s *server) lock(w http.ResponseWriter, r *http.Request, name, op string, body []byte) {
	if op != "acquire" && op != "renew" && op != "release" {
		writeError(w, fail(404, "no-route", "lock operations are acquire, renew and release"))
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		writeError(w, fail(405, "method-not-allowed", "use POST"))
		return
	}
	if !validName(name) {
		writeError(w, fail(400, "bad-name", "lock names match [A-Za-z0-9._-]{1,128}"))
		return
	}
	var req struct {
		Owner string          `json:"owner"`
		TTL   json.RawMessage `json:"ttl_ms"`
		Token *string         `json:"token"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, fail(400, "bad-request", "the body is not a JSON object: %v", err))
		return
	}
	if req.Owner == "" || len(req.Owner) > 256 {
		writeError(w, fail(400, "bad-request", "owner must be 1..256 bytes"))
		return
	}
	var ttl int64
	if op != "release" {
		v, err := strconv.ParseInt(string(req.TTL), 10, 64)
		if err != nil || v < 1 || v > 86400000 {
			writeError(w, fail(400, "bad-request", "ttl_ms must be an integer in 1..86400000"))
			return
		}
		ttl = v
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	l, held := s.leases[name]
	if op == "acquire" {
		if held && l.owner != req.Owner && now.Before(l.expires) {
			writeError(w, fail(409, "held", "lock %s is held", name))
			return
		}
		tok := s.nextToken()
		s.leases[name] = lease{owner: req.Owner, token: tok, expires: now.Add(time.Duration(ttl) * time.Millisecond)}
		writeJSON(w, 200, map[string]any{"token": strconv.FormatUint(tok, 10), "ttl_ms": ttl})
		return
	}
	raw := ""
	if req.Token != nil {
		raw = *req.Token
	}
	tok, err := parseToken(raw)
	if err != nil {
		writeError(w, err)
		return
	}
	if !held || l.owner != req.Owner || l.token != tok || !now.Before(l.expires) {
		writeError(w, fail(409, "lost", "the lease on %s is not held with this token", name))
		return
	}
	if op == "renew" {
		l.expires = now.Add(time.Duration(ttl) * time.Millisecond)
		s.leases[name] = l
		writeJSON(w, 200, map[string]any{"token": raw, "ttl_ms": ttl})
		return
	}
	delete(s.leases, name)
	writeJSON(w, 200, map[string]string{"token": raw})
}

func (s *server) resource(w http.ResponseWriter, r *http.Request, key string, body []byte) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead && r.Method != http.MethodPut {
		w.Header().Set("Allow", "GET, PUT")
		writeError(w, fail(405, "method-not-allowed", "use GET or PUT"))
		return
	}
	if !validName(key) {
		writeError(w, fail(400, "bad-name", "resource names match [A-Za-z0-9._-]{1,128}"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	res := s.resources[key]
	if r.Method != http.MethodPut {
		if res == nil {
			writeError(w, fail(404, "not-found", "%s was never written", key))
			return
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Fencing-Token", strconv.FormatUint(res.Token, 10))
		w.Write(res.Value)
		return
	}
	tok, err := parseToken(r.Header.Get("Fencing-Token"))
	if err != nil {
		writeError(w, err)
		return
	}
	if res != nil && tok <= res.HighWater {
		hw := strconv.FormatUint(res.HighWater, 10)
		writeError(w, &apiError{status: 409, word: "stale", msg: "token " + strconv.FormatUint(tok, 10) + " is not newer than " + hw, highWater: hw})
		return
	}
	next := &resource{HighWater: tok, Token: tok, Value: body}
	old := res
	s.resources[key] = next
	if err := s.persist(); err != nil {
		if old == nil {
			delete(s.resources, key)
		} else {
			s.resources[key] = old
		}
		writeError(w, err)
		return
	}
	w.WriteHeader(204)
}

// persist writes every resource to state.json durably (temporary file,
// fsync, rename, folder fsync) before the answer leaves.
func (s *server) persist() error {
	b, err := json.Marshal(s.resources)
	if err != nil {
		return err
	}
	tmp := filepath.Join(s.dir, "state.json.tmp")
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(s.dir, "state.json")); err != nil {
		return err
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

func main() {
	port := flag.Int("port", 0, "port to listen on (127.0.0.1)")
	data := flag.String("data", "", "folder for the durable state")
	flag.Parse()
	if *port <= 0 || *port > math.MaxUint16 || *data == "" {
		log.Fatal("usage: wallclock-fence --port PORT --data DIR")
	}
	s := &server{dir: *data, leases: map[string]lease{}, resources: map[string]*resource{}}
	if b, err := os.ReadFile(filepath.Join(*data, "state.json")); err == nil {
		if err := json.Unmarshal(b, &s.resources); err != nil {
			log.Fatalf("reading the state: %v", err)
		}
	}
	addr := "127.0.0.1:" + strconv.Itoa(*port)
	log.Printf("wallclock-fence on %s, data %s", addr, *data)
	log.Fatal(http.ListenAndServe(addr, s))
}
