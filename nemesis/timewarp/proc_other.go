//go:build !linux

package timewarp

import "errors"

var errNoProc = errors.New("timewarp: processes are read through /proc (Linux only)")

func startTime(int) (uint64, error) { return 0, errNoProc }

// Dynamic reports whether process pid runs a dynamically linked program.
func Dynamic(int) (bool, error) { return false, errNoProc }

// Preloaded reports whether a library named base is mapped into pid.
func Preloaded(int, string) bool { return false }

// ProcessGroup is the scope of process group pgid.
func ProcessGroup(int) Scope { return func() ([]int, error) { return nil, errNoProc } }

// PIDNamespace is the scope of pid's PID namespace.
func PIDNamespace(int) Scope { return func() ([]int, error) { return nil, errNoProc } }

// Reachable says why Inject cannot patch process pid.
func Reachable(int) error { return ErrUnsupported }

// live: no process can be inspected here.
func live(int) bool { return false }
