package fencing

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fencecheck/fencecheck/history"
)

// Limits of Fencing API v1.
const (
	// MaxBodyBytes bounds every request body (a value, or a lock request's
	// JSON); larger bodies get 413.
	MaxBodyBytes = 1 << 20
	// MaxNameLen bounds lock and resource names.
	MaxNameLen = 128
	// MaxTTL bounds ttl_ms: a lease longer than a day is a client bug, and a
	// bound keeps expiry arithmetic far from overflow.
	MaxTTL = 24 * time.Hour
	// TokenHeader carries a write's token and a read's token-of-value.
	TokenHeader = "Fencing-Token"
)

// Error words of Fencing API v1 (the "error" field of every error body).
const (
	ErrWordHeld           = "held"
	ErrWordLost           = "lost"
	ErrWordStale          = "stale"
	ErrWordMissingToken   = "missing-token"
	ErrWordMalformedToken = "malformed-token"
	ErrWordForged         = "forged"
	ErrWordNotFound       = "not-found"
	ErrWordBadName        = "bad-name"
	ErrWordBadRequest     = "bad-request"
	ErrWordTooLarge       = "too-large"
	ErrWordMethod         = "method-not-allowed"
	ErrWordNoRoute        = "no-route"
	ErrWordUnavailable    = "unavailable"
	ErrWordInternal       = "internal"
)

// ServerBugs are the reference's deliberate faults that live in the HTTP
// layer, because that is where the decision they break is made. The memory
// package's Bugs set maps onto them; correct servers leave them zero.
type ServerBugs struct {
	// MissingAsZero: a write without a token (absent or empty header) is
	// stored as token 0 with the high-water check skipped, instead of 428.
	MissingAsZero bool
	// AcceptForged: the resource does not verify seals (tokens handed out are
	// still sealed when SealKey is set).
	AcceptForged bool
}

// ServerOptions configure NewServer.
type ServerOptions struct {
	// SealKey, when set, makes the server authenticate tokens: acquire hands
	// out "N.HEXHMAC" and every request that carries a token must carry the
	// right seal, or gets 403 forged.
	SealKey []byte
	// Bugs switch on deliberate faults (reference only).
	Bugs ServerBugs
}

type server struct {
	store  Store
	sealer *Sealer
	bugs   ServerBugs
}

// NewServer returns the Fencing API v1 handler over store. The handler only
// parses, validates and maps outcomes to status codes; every check on state
// happens atomically inside the store.
func NewServer(store Store, opts ServerOptions) http.Handler {
	s := &server{store: store, sealer: NewSealer(opts.SealKey), bugs: opts.Bugs}
	mux := http.NewServeMux()
	// Patterns carry no method: Go's mux would answer a wrong method with a
	// plain-text 405, and every error of the API is JSON.
	mux.HandleFunc("/v1/health", s.health)
	mux.HandleFunc("/v1/locks/{lock}/{op}", s.lockOp)
	mux.HandleFunc("/v1/resources/{key}", s.resource)
	mux.HandleFunc("/v1/locks/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, ErrWordBadName, "lock name must match [A-Za-z0-9._-]{1,128}")
	})
	mux.HandleFunc("/v1/resources/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusBadRequest, ErrWordBadName, "resource name must match [A-Za-z0-9._-]{1,128}")
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, ErrWordNoRoute, "no such endpoint in Fencing API v1: "+r.URL.Path)
	})
	return mux
}

// ValidName reports whether s is a valid lock or resource name.
func ValidName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s == "." || s == ".." {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// ErrorBody is the JSON body of every error answer.
type ErrorBody struct {
	Error     string `json:"error"`
	Message   string `json:"message"`
	HighWater string `json:"high_water,omitempty"`
}

// LockRequest is the body of acquire, renew and release.
type LockRequest struct {
	Owner string `json:"owner"`
	Token string `json:"token,omitempty"`
	TTLMs int64  `json:"ttl_ms,omitempty"`
}

// LockResponse is the body of a successful acquire, renew or release.
type LockResponse struct {
	Token string `json:"token"`
	TTLMs int64  `json:"ttl_ms,omitempty"`
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, _ := json.Marshal(v)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)+1))
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

func writeError(w http.ResponseWriter, status int, word, msg string) {
	writeJSON(w, status, ErrorBody{Error: word, Message: msg})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	writeError(w, http.StatusMethodNotAllowed, ErrWordMethod, "use "+allow)
}

// readBody reads at most MaxBodyBytes; ok is false when an answer was sent.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	if r.ContentLength > MaxBodyBytes {
		writeError(w, http.StatusRequestEntityTooLarge, ErrWordTooLarge, "body exceeds 1 MiB")
		return nil, false
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, ErrWordTooLarge, "body exceeds 1 MiB")
		} else {
			writeError(w, http.StatusBadRequest, ErrWordBadRequest, "reading body: "+err.Error())
		}
		return nil, false
	}
	return b, true
}

// storeError maps a store outcome that is not one of the API's definite
// answers. Anything else may have taken effect (a backend timeout after the
// write reached it), so it must be a 5xx: clients record those as info.
func (s *server) storeError(w http.ResponseWriter, err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		writeError(w, http.StatusServiceUnavailable, ErrWordUnavailable, "store did not answer in time: "+err.Error())
		return
	}
	writeError(w, http.StatusInternalServerError, ErrWordInternal, "store: "+err.Error())
}

func (s *server) health(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET")
		return
	}
	if hc, ok := s.store.(HealthChecker); ok {
		if err := hc.Health(r.Context()); err != nil {
			writeError(w, http.StatusServiceUnavailable, ErrWordUnavailable, "store not ready: "+err.Error())
			return
		}
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok", "api": "v1"})
}

// formatToken spells a token as handed out: sealed when sealing is on.
func (s *server) formatToken(n uint64) string {
	if s.sealer != nil {
		return s.sealer.Seal(n)
	}
	return history.FormatToken(n)
}

// checkToken parses a token a client sent and verifies its seal. verify is
// false where a bug switch says the seal is not checked. ok is false when an
// answer was sent.
func (s *server) checkToken(w http.ResponseWriter, tok string, verify bool) (uint64, bool) {
	n, seal, err := history.SplitToken(tok)
	if err != nil {
		writeError(w, http.StatusBadRequest, ErrWordMalformedToken, "token must be a decimal uint64, optionally followed by .SEAL")
		return 0, false
	}
	if s.sealer != nil && verify {
		if seal == "" {
			writeError(w, http.StatusForbidden, ErrWordForged, "token is not sealed; this server authenticates tokens")
			return 0, false
		}
		if !s.sealer.Verify(n, seal) {
			writeError(w, http.StatusForbidden, ErrWordForged, "token seal does not verify")
			return 0, false
		}
	}
	return n, true
}

func (s *server) lockOp(w http.ResponseWriter, r *http.Request) {
	lock, op := r.PathValue("lock"), r.PathValue("op")
	if op != "acquire" && op != "renew" && op != "release" {
		writeError(w, http.StatusNotFound, ErrWordNoRoute, "lock operations are acquire, renew and release")
		return
	}
	if r.Method != http.MethodPost {
		methodNotAllowed(w, "POST")
		return
	}
	if !ValidName(lock) {
		writeError(w, http.StatusBadRequest, ErrWordBadName, "lock name must match [A-Za-z0-9._-]{1,128}")
		return
	}
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	// ttl_ms and token are decoded loosely first so that a missing field and
	// a zero are told apart.
	var req struct {
		Owner *string `json:"owner"`
		Token *string `json:"token"`
		TTLMs *int64  `json:"ttl_ms"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeError(w, http.StatusBadRequest, ErrWordBadRequest, "body must be a JSON object: "+err.Error())
		return
	}
	if req.Owner == nil || *req.Owner == "" || len(*req.Owner) > 256 {
		writeError(w, http.StatusBadRequest, ErrWordBadRequest, "owner must be a non-empty string of at most 256 bytes")
		return
	}
	owner := *req.Owner
	var ttl time.Duration
	if op != "release" {
		if req.TTLMs == nil || *req.TTLMs <= 0 || *req.TTLMs > MaxTTL.Milliseconds() {
			writeError(w, http.StatusBadRequest, ErrWordBadRequest, "ttl_ms must be an integer in 1..86400000")
			return
		}
		ttl = time.Duration(*req.TTLMs) * time.Millisecond
	}
	var token uint64
	if op != "acquire" {
		if req.Token == nil || *req.Token == "" {
			writeError(w, http.StatusPreconditionRequired, ErrWordMissingToken, op+" needs the token the lock was acquired with")
			return
		}
		if token, ok = s.checkToken(w, *req.Token, true); !ok {
			return
		}
	}
	ctx := r.Context()
	var err error
	granter, granting := s.store.(LeaseGranter)
	switch {
	case op == "acquire" && granting:
		token, ttl, err = granter.AcquireLease(ctx, lock, owner, ttl)
	case op == "acquire":
		token, err = s.store.Acquire(ctx, lock, owner, ttl)
	case op == "renew" && granting:
		ttl, err = granter.RenewLease(ctx, lock, owner, token, ttl)
	case op == "renew":
		err = s.store.Renew(ctx, lock, owner, token, ttl)
	case op == "release":
		err = s.store.Release(ctx, lock, owner, token)
	}
	switch {
	case errors.Is(err, ErrHeld):
		writeError(w, http.StatusConflict, ErrWordHeld, "lock "+lock+" is held by another owner")
	case errors.Is(err, ErrLost):
		writeError(w, http.StatusConflict, ErrWordLost, "lease on "+lock+" is no longer held by this owner with this token")
	case err != nil:
		s.storeError(w, err)
	default:
		// ttl is the lease granted; it is 0 for release, so no ttl_ms is
		// sent.
		writeJSON(w, http.StatusOK, LockResponse{Token: s.formatToken(token), TTLMs: ttl.Milliseconds()})
	}
}

func (s *server) resource(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	switch r.Method {
	case http.MethodPut:
	case http.MethodGet, http.MethodHead:
	default:
		methodNotAllowed(w, "GET, PUT")
		return
	}
	if !ValidName(key) {
		writeError(w, http.StatusBadRequest, ErrWordBadName, "resource name must match [A-Za-z0-9._-]{1,128}")
		return
	}
	if r.Method == http.MethodPut {
		s.write(w, r, key)
	} else {
		s.read(w, r, key)
	}
}

func (s *server) write(w http.ResponseWriter, r *http.Request, key string) {
	body, ok := readBody(w, r)
	if !ok {
		return
	}
	// An absent header and an empty one are the same: a proxy that strips a
	// header and one that blanks it must both meet 428, never a token of 0.
	tok := r.Header.Get(TokenHeader)
	ctx := r.Context()
	if tok == "" {
		if !s.bugs.MissingAsZero {
			writeError(w, http.StatusPreconditionRequired, ErrWordMissingToken, "a write needs a Fencing-Token header")
			return
		}
		uw, ok := s.store.(UncheckedWriter)
		if !ok {
			writeError(w, http.StatusInternalServerError, ErrWordInternal, "missing-as-zero needs a store that can write unchecked")
			return
		}
		if err := uw.WriteUnchecked(ctx, key, 0, body); err != nil {
			s.storeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	n, ok := s.checkToken(w, tok, !s.bugs.AcceptForged)
	if !ok {
		return
	}
	err := s.store.Write(ctx, key, n, body)
	var stale *StaleError
	if errors.As(err, &stale) {
		writeJSON(w, http.StatusConflict, ErrorBody{
			Error:     ErrWordStale,
			Message:   "token " + history.FormatToken(n) + " is not newer than the high-water mark " + history.FormatToken(stale.HighWater),
			HighWater: history.FormatToken(stale.HighWater),
		})
		return
	}
	if err != nil {
		s.storeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *server) read(w http.ResponseWriter, r *http.Request, key string) {
	value, n, err := s.store.Read(r.Context(), key)
	if errors.Is(err, ErrNotFound) {
		writeError(w, http.StatusNotFound, ErrWordNotFound, "resource "+key+" was never written")
		return
	}
	if err != nil {
		s.storeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set(TokenHeader, s.formatToken(n))
	w.Header().Set("Content-Length", strconv.Itoa(len(value)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		w.Write(value)
	}
}
