package docker

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Pauses take the host path where they can: the freezer file of the
// container's cgroup, written from this machine, freezes it in a
// millisecond or two, where the engine's API took 15-25 ms on this
// machine and a hundred and more under load; a freeze timed by a request
// on its way (a node frozen while it serves a write) needs the former.
// An engine elsewhere, a layout not known here, or FENCECHECK_FAULT_PATH=api
// takes the API.

// freezer is a container's freezer file and the values that freeze and
// thaw it (cgroup v1: freezer.state; v2: cgroup.freeze).
type freezer struct {
	dir, file, on, off string
}

// freezerOf is the freezer of container id's cgroup on this machine, if
// there is one.
func freezerOf(id string) (freezer, bool) {
	for _, f := range []freezer{
		{"/sys/fs/cgroup/freezer/docker/" + id, "freezer.state", "FROZEN", "THAWED"},
		{"/sys/fs/cgroup/freezer/system.slice/docker-" + id + ".scope", "freezer.state", "FROZEN", "THAWED"},
		{"/sys/fs/cgroup/system.slice/docker-" + id + ".scope", "cgroup.freeze", "1", "0"},
		{"/sys/fs/cgroup/docker/" + id, "cgroup.freeze", "1", "0"},
	} {
		if _, err := os.Stat(filepath.Join(f.dir, f.file)); err == nil {
			return f, true
		}
	}
	return freezer{}, false
}

// set writes the freezer and waits until it took (v1 passes through
// FREEZING; v2 says so in cgroup.events).
func (f freezer) set(ctx context.Context, frozen bool) error {
	v := f.off
	if frozen {
		v = f.on
	}
	if err := os.WriteFile(filepath.Join(f.dir, f.file), []byte(v), 0); err != nil {
		return err
	}
	for deadline := time.Now().Add(5 * time.Second); ; {
		if f.is(frozen) {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("the freezer of %s did not take %s", f.dir, v)
		}
		time.Sleep(200 * time.Microsecond)
	}
}

func (f freezer) is(frozen bool) bool {
	if f.file == "freezer.state" {
		b, err := os.ReadFile(filepath.Join(f.dir, f.file))
		return err == nil && strings.TrimSpace(string(b)) == map[bool]string{true: f.on, false: f.off}[frozen]
	}
	b, err := os.ReadFile(filepath.Join(f.dir, "cgroup.events"))
	return err == nil && strings.Contains(string(b), map[bool]string{true: "frozen 1", false: "frozen 0"}[frozen])
}

// hostFreezer is the freezer a pause of the container takes, unless the
// API path is forced.
func hostFreezer(id string) (freezer, bool) {
	if p, err := forcedPath(); err != nil || p == PathAPI {
		return freezer{}, false
	}
	return freezerOf(id)
}
