// Package s3 is fencecheck's object-store resource: the Fencing API's
// writes and reads kept as objects in an S3 bucket, where the token check is
// a conditional PUT (If-Match on the ETag just read), with the tokens from
// another store (etcd); and the container targets "s3" and
// "s3-unconditional" that run it against SeaweedFS's S3 gateway.
package s3

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/fencecheck/fencecheck/fencing"
)

// WriteMode is how a write reaches the bucket once the token is checked.
type WriteMode string

const (
	// Conditional: the PUT carries If-Match with the ETag the check read
	// (If-None-Match: * when there was no object), so the store refuses it
	// (412) if anyone wrote in between. A refused PUT is a lost race: the
	// write reads again and decides again; it is never acknowledged as is.
	Conditional WriteMode = "conditional"
	// Unconditional: the same check, then a plain PUT: the check-then-act
	// race. A writer that read an older object overwrites whatever was
	// written after its read, newer tokens included.
	Unconditional WriteMode = "unconditional"
)

// ParseWriteMode reads a WriteMode by name.
func ParseWriteMode(s string) (WriteMode, error) {
	switch WriteMode(s) {
	case Conditional, Unconditional:
		return WriteMode(s), nil
	}
	return "", fmt.Errorf("unknown s3 write mode %q (conditional or unconditional)", s)
}

// The stored mark. It travels inside the object's body, as its first line
// (the ETag of a simple PUT is the MD5 of the body, so an ETag then names a
// token as well as a value: two writes of one value under different tokens
// never share an ETag, and If-Match cannot mistake one for the other), and
// again as user metadata for whoever lists the bucket.
const (
	markPrefix = "fencing-token="
	// MetaHeader is the object's metadata copy of its mark.
	MetaHeader = "X-Amz-Meta-Fencing-Token"
)

// frame is an object's body: the mark line, then the value.
func frame(token uint64, value []byte) []byte {
	b := make([]byte, 0, len(markPrefix)+21+len(value))
	b = append(b, markPrefix...)
	b = strconv.AppendUint(b, token, 10)
	b = append(b, '\n')
	return append(b, value...)
}

// unframe splits a body into its mark and value.
func unframe(body []byte) (uint64, []byte, error) {
	line, value, ok := bytes.Cut(body, []byte{'\n'})
	rest, hasPrefix := bytes.CutPrefix(line, []byte(markPrefix))
	if !ok || !hasPrefix {
		return 0, nil, errors.New("the object has no fencing-token line: not written by fencecheck")
	}
	token, err := strconv.ParseUint(string(rest), 10, 64)
	if err != nil {
		return 0, nil, fmt.Errorf("the object's fencing token %q: %w", rest, err)
	}
	return token, value, nil
}

// Bucket is the resource half of a fencing.Store: values and their marks as
// objects of one bucket, reached over HTTP, path-style: anonymous (the
// gateway here has no identities configured), or signed with SigV4 when
// given credentials (a store of one's own).
type Bucket struct {
	endpoint, bucket string
	mode             WriteMode
	client           *http.Client
	timeout          time.Duration
	creds            *Credentials
	signer           *v4.Signer

	mu      sync.Mutex
	created bool

	// lostRaces counts conditional PUTs the store refused.
	lostRaces atomic.Int64
	// beforePut, when set (tests), runs between a write's check and its
	// PUT: where a concurrent writer's PUT lands in the race.
	beforePut func(key string)
}

// LostRaces is how many conditional PUTs the store has refused (412): each
// a write that another overtook between its read and its PUT, read again.
func (b *Bucket) LostRaces() int64 { return b.lostRaces.Load() }

// BucketOptions configure NewBucket.
type BucketOptions struct {
	// Endpoint is the gateway's base URL, e.g. http://10.0.0.5:8333.
	Endpoint string
	// Bucket is created on first use when missing (default "fencecheck").
	Bucket string
	Mode   WriteMode
	// Timeout bounds each operation, retries after lost races included
	// (default 3 s). An operation that times out is an error, which the
	// server turns into 5xx (info): its PUT may still land.
	Timeout time.Duration
	// Credentials, when set, sign every request (AWS Signature Version 4).
	Credentials *Credentials
	_           struct{}
}

// Credentials sign requests for a store that requires it.
type Credentials struct {
	AccessKeyID, SecretAccessKey, SessionToken string
	// Region is the signing region (default us-east-1).
	Region string
}

// NewBucket makes the resource without contacting the gateway.
func NewBucket(o BucketOptions) (*Bucket, error) {
	if o.Endpoint == "" {
		return nil, errors.New("s3: no endpoint")
	}
	if o.Bucket == "" {
		o.Bucket = "fencecheck"
	}
	if o.Mode == "" {
		o.Mode = Conditional
	}
	if _, err := ParseWriteMode(string(o.Mode)); err != nil {
		return nil, err
	}
	if o.Timeout <= 0 {
		o.Timeout = 3 * time.Second
	}
	b := &Bucket{endpoint: strings.TrimRight(o.Endpoint, "/"), bucket: o.Bucket, mode: o.Mode,
		client:  &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 30 * time.Second}},
		timeout: o.Timeout}
	if o.Credentials != nil {
		c := *o.Credentials
		b.creds = &c
		if b.creds.Region == "" {
			b.creds.Region = "us-east-1"
		}
		b.signer = v4.NewSigner()
	}
	return b, nil
}

// objectURL is the key's path-style URL (each segment escaped).
func (b *Bucket) objectURL(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return b.endpoint + "/" + url.PathEscape(b.bucket) + "/" + strings.Join(parts, "/")
}

// do sends one request and reads the whole answer.
func (b *Bucket) do(ctx context.Context, method, u string, body []byte, header http.Header) (*http.Response, []byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return nil, nil, err
	}
	for k, vs := range header {
		req.Header[k] = vs
	}
	if b.signer != nil {
		sum := sha256.Sum256(body)
		payload := hex.EncodeToString(sum[:])
		req.Header.Set("X-Amz-Content-Sha256", payload)
		c := aws.Credentials{AccessKeyID: b.creds.AccessKeyID, SecretAccessKey: b.creds.SecretAccessKey, SessionToken: b.creds.SessionToken}
		if err := b.signer.SignHTTP(ctx, c, req, payload, "s3", b.creds.Region, time.Now()); err != nil {
			return nil, nil, fmt.Errorf("signing: %w", err)
		}
	}
	resp, err := b.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, nil, err
	}
	return resp, data, nil
}

// ensureBucket creates the bucket once per process (an existing one is
// fine); Health and every operation go through it.
func (b *Bucket) ensureBucket(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.created {
		return nil
	}
	resp, body, err := b.do(ctx, http.MethodPut, b.endpoint+"/"+url.PathEscape(b.bucket), nil, nil)
	if err != nil {
		return fmt.Errorf("s3 create bucket %s: %w", b.bucket, err)
	}
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusConflict {
		// A key that may not create buckets may still use one that exists.
		head, _, herr := b.do(ctx, http.MethodHead, b.endpoint+"/"+url.PathEscape(b.bucket), nil, nil)
		if herr != nil || head.StatusCode != http.StatusOK {
			return fmt.Errorf("s3 create bucket %s: %s: %s", b.bucket, resp.Status, abbrev(body))
		}
	}
	b.created = true
	return nil
}

// object is what a GET found: exists false when there is none.
type object struct {
	exists bool
	etag   string
	token  uint64
	value  []byte
}

func (b *Bucket) get(ctx context.Context, key string) (object, error) {
	resp, body, err := b.do(ctx, http.MethodGet, b.objectURL(key), nil, nil)
	if err != nil {
		return object{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	switch {
	case noSuchBucket(resp, body):
		return object{}, b.bucketGone("get " + key)
	case resp.StatusCode == http.StatusNotFound:
		return object{}, nil
	case resp.StatusCode == http.StatusOK:
	default:
		return object{}, fmt.Errorf("s3 get %s: %s: %s", key, resp.Status, abbrev(body))
	}
	token, value, err := unframe(body)
	if err != nil {
		return object{}, fmt.Errorf("s3 get %s: %w", key, err)
	}
	etag := resp.Header.Get("ETag")
	if etag == "" {
		return object{}, fmt.Errorf("s3 get %s: the answer has no ETag: a conditional write needs one", key)
	}
	return object{exists: true, etag: etag, token: token, value: value}, nil
}

// noSuchBucket tells a missing bucket from a missing key (both 404).
func noSuchBucket(resp *http.Response, body []byte) bool {
	return resp.StatusCode == http.StatusNotFound && bytes.Contains(body, []byte("<Code>NoSuchBucket</Code>"))
}

// bucketGone notes that the store has lost the bucket (a store that lost
// its namespace at a crash): the next operation creates it again, empty,
// and the checker sees what went with it. This one fails (5xx).
func (b *Bucket) bucketGone(what string) error {
	b.mu.Lock()
	b.created = false
	b.mu.Unlock()
	return fmt.Errorf("s3 %s: bucket %s does not exist (any more)", what, b.bucket)
}

// errLostRace is a conditional PUT the store refused: someone wrote (or
// deleted) the object since it was read.
var errLostRace = errors.New("lost the race: the object changed since it was read")

func (b *Bucket) put(ctx context.Context, key string, token uint64, value []byte, read object) error {
	h := http.Header{}
	h.Set("Content-Type", "application/octet-stream")
	h.Set(MetaHeader, strconv.FormatUint(token, 10))
	if b.mode == Conditional {
		if read.exists {
			h.Set("If-Match", read.etag)
		} else {
			h.Set("If-None-Match", "*")
		}
	}
	resp, body, err := b.do(ctx, http.MethodPut, b.objectURL(key), frame(token, value), h)
	if err != nil {
		return fmt.Errorf("s3 put %s: %w", key, err)
	}
	if noSuchBucket(resp, body) {
		return b.bucketGone("put " + key)
	}
	switch resp.StatusCode {
	case http.StatusOK:
		return nil
	case http.StatusPreconditionFailed:
		return errLostRace
	case http.StatusConflict, http.StatusNotFound:
		// AWS answers 409 ConditionalRequestConflict to a conditional PUT
		// racing another on the same key, and If-Match on a key deleted
		// since the read is 404 NoSuchKey: both mean "read again".
		if b.mode == Conditional {
			return errLostRace
		}
	}
	return fmt.Errorf("s3 put %s: %s: %s", key, resp.Status, abbrev(body))
}

// Write implements fencing.Store's Write: read the object, compare the
// token with its mark, and put (conditionally, in Conditional mode) when
// newer. A lost race reads again: the newer object may make the token stale,
// or not (it may even have been written under an older token by an
// unconditional writer; in Conditional mode none is).
func (b *Bucket) Write(ctx context.Context, key string, token uint64, value []byte) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if err := b.ensureBucket(ctx); err != nil {
		return err
	}
	for races := 0; ; races++ {
		read, err := b.get(ctx, key)
		if err != nil {
			return err
		}
		if read.exists && token <= read.token {
			return &fencing.StaleError{HighWater: read.token}
		}
		if b.beforePut != nil {
			b.beforePut(key)
		}
		err = b.put(ctx, key, token, value, read)
		if !errors.Is(err, errLostRace) {
			return err
		}
		b.lostRaces.Add(1)
		if ctx.Err() != nil {
			return fmt.Errorf("s3 write %s: %d lost races, then %w", key, races+1, ctx.Err())
		}
	}
}

// Read implements fencing.Store's Read.
func (b *Bucket) Read(ctx context.Context, key string) ([]byte, uint64, error) {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if err := b.ensureBucket(ctx); err != nil {
		return nil, 0, err
	}
	read, err := b.get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	if !read.exists {
		return nil, 0, fencing.ErrNotFound
	}
	return read.value, read.token, nil
}

// Health says whether the gateway answers and the bucket is there.
func (b *Bucket) Health(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, b.timeout)
	defer cancel()
	if err := b.ensureBucket(ctx); err != nil {
		return err
	}
	resp, body, err := b.do(ctx, http.MethodHead, b.endpoint+"/"+url.PathEscape(b.bucket), nil, nil)
	if err != nil {
		return fmt.Errorf("s3 health: %w", err)
	}
	if resp.StatusCode == http.StatusNotFound {
		return b.bucketGone("health")
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("s3 health: bucket %s: %s: %s", b.bucket, resp.Status, abbrev(body))
	}
	return nil
}

func abbrev(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}

// Issuer is the lock half of a fencing.Store (its Write and Read are not
// used): etcd's store here.
type Issuer interface {
	fencing.Store
	fencing.HealthChecker
}

// Store is a fencing.Store whose locks and tokens are the issuer's and
// whose resource is the bucket: the adapter holds no state of its own.
type Store struct {
	Issuer Issuer
	*Bucket
}

var (
	_ fencing.Store         = (*Store)(nil)
	_ fencing.LeaseGranter  = (*Store)(nil)
	_ fencing.HealthChecker = (*Store)(nil)
)

// Acquire implements fencing.Store.
func (s *Store) Acquire(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, error) {
	return s.Issuer.Acquire(ctx, lock, owner, ttl)
}

// AcquireLease passes the issuer's granted lease on (fencing.LeaseGranter).
func (s *Store) AcquireLease(ctx context.Context, lock, owner string, ttl time.Duration) (uint64, time.Duration, error) {
	if lg, ok := s.Issuer.(fencing.LeaseGranter); ok {
		return lg.AcquireLease(ctx, lock, owner, ttl)
	}
	token, err := s.Issuer.Acquire(ctx, lock, owner, ttl)
	return token, ttl, err
}

// Renew implements fencing.Store.
func (s *Store) Renew(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) error {
	return s.Issuer.Renew(ctx, lock, owner, token, ttl)
}

// RenewLease passes the issuer's granted lease on (fencing.LeaseGranter).
func (s *Store) RenewLease(ctx context.Context, lock, owner string, token uint64, ttl time.Duration) (time.Duration, error) {
	if lg, ok := s.Issuer.(fencing.LeaseGranter); ok {
		return lg.RenewLease(ctx, lock, owner, token, ttl)
	}
	return ttl, s.Issuer.Renew(ctx, lock, owner, token, ttl)
}

// Release implements fencing.Store.
func (s *Store) Release(ctx context.Context, lock, owner string, token uint64) error {
	return s.Issuer.Release(ctx, lock, owner, token)
}

// Health needs both halves.
func (s *Store) Health(ctx context.Context) error {
	if err := s.Issuer.Health(ctx); err != nil {
		return err
	}
	return s.Bucket.Health(ctx)
}

// Close closes the issuer's connection.
func (s *Store) Close() error { return s.Issuer.Close() }
