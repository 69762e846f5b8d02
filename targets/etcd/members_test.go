package etcd

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A removal the cluster declines now (refused as unsafe, or not committed
// in time while other faults keep its quorum away) is refused, not failed:
// the gate counts a nemesis that only failed as never exercised. Anything
// else is a failure.
func TestARemovalTheClusterCannotCommitNowIsRefused(t *testing.T) {
	wrap := func(err error) error { return fmt.Errorf("member remove: %w", err) }
	for _, err := range []error{rpctypes.ErrUnhealthy, context.DeadlineExceeded, rpctypes.ErrTimeout,
		rpctypes.ErrNoLeader, rpctypes.ErrTimeoutDueToConnectionLost, status.Error(codes.Unavailable, "connection refused"), status.Error(codes.DeadlineExceeded, "context deadline exceeded")} {
		assert.True(t, refusedNow(wrap(err)), "%v", err)
	}
	for _, err := range []error{nil, errStillListed, rpctypes.ErrPermissionDenied, errors.New("no such container"),
		status.Error(codes.InvalidArgument, "bad peer URL")} {
		assert.False(t, refusedNow(wrap(err)), "%v", err)
	}
	assert.False(t, refusedNow(nil))
}
