package docker

import (
	"fmt"
	"strings"
)

// HostBinds says why a folder mounted on this machine (the lazyfs layer of
// the power-loss nemesis, a FUSE mount) would not reach the containers as a
// bind mount, or nil when it does: the engine must run on this machine,
// reached through its local socket, and see this machine's mounts.
func (r *Runtime) HostBinds() error {
	host := r.cli.DaemonHost()
	if !strings.HasPrefix(host, "unix://") {
		return fmt.Errorf("the engine is reached at %s, not through a socket on this machine: a FUSE mount made here does not reach its containers", host)
	}
	return nil
}
