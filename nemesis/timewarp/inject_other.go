//go:build !(linux && amd64)

package timewarp

import "fmt"

func inject(pid int, opts Options) (*Process, error) {
	return nil, fmt.Errorf("pid %d: %w", pid, ErrUnsupported)
}
