package main

import (
	"context"
	"errors"
	"flag"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/targets/etcd"
	"github.com/fencecheck/fencecheck/targets/s3"
)

// s3EndpointEnv is the container-friendly fallback for --s3-endpoint.
const s3EndpointEnv = "FENCECHECK_S3_ENDPOINT"

func init() {
	var endpoint, bucket, write, region string
	var timeout time.Duration
	registerBackend("s3", Backend{
		Usage: "locks and tokens from etcd (--etcd-endpoints), values as objects of an S3 bucket written with If-Match (--s3-endpoint)",
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&endpoint, "s3-endpoint", "", "S3 gateway base URL, path-style and anonymous, e.g. http://host:8333 (env "+s3EndpointEnv+")")
			fs.StringVar(&bucket, "s3-bucket", "fencecheck", "bucket (created when missing)")
			fs.StringVar(&write, "s3-write", string(s3.Conditional), "conditional (If-Match on the ETag read: the check holds) or unconditional (a plain PUT after the check: the check-then-act race)")
			fs.StringVar(&region, "s3-region", "us-east-1", "signing region, when AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are set (requests are then signed with SigV4; otherwise anonymous)")
			fs.DurationVar(&timeout, "s3-timeout", 3*time.Second, "bound on each write or read; one that times out answers 5xx (unknown outcome)")
		},
		Open: func(ctx context.Context, cfg Config) (fencing.Store, fencing.ServerOptions, error) {
			ep := endpoint
			if ep == "" {
				ep = cfg.Getenv(s3EndpointEnv)
			}
			if ep == "" {
				return nil, fencing.ServerOptions{}, errors.New("--backend s3 needs --s3-endpoint URL")
			}
			mode, err := s3.ParseWriteMode(write)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			opts, err := etcdStoreOptions("s3", cfg)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			var creds *s3.Credentials
			if id := cfg.Getenv("AWS_ACCESS_KEY_ID"); id != "" {
				creds = &s3.Credentials{AccessKeyID: id, SecretAccessKey: cfg.Getenv("AWS_SECRET_ACCESS_KEY"),
					SessionToken: cfg.Getenv("AWS_SESSION_TOKEN"), Region: region}
			}
			b, err := s3.NewBucket(s3.BucketOptions{Endpoint: ep, Bucket: bucket, Mode: mode, Timeout: timeout, Credentials: creds})
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			// Neither half reads the adapter's clock: leases live in etcd,
			// and the bucket's check compares tokens only.
			issuer, err := etcd.OpenStore(opts)
			if err != nil {
				return nil, fencing.ServerOptions{}, err
			}
			return &s3.Store{Issuer: issuer, Bucket: b}, cfg.ServerOptions(), nil
		},
	})
}
