//go:build !linux

package timewarp

import "os/exec"

// Wait waits for a child started by cmd to exit.
func Wait(cmd *exec.Cmd) error { return cmd.Wait() }
