package fencing

import (
	"io"
	"os"

	"github.com/fencecheck/fencecheck/durable"
)

// WriteFile is durable.WriteFile, kept for the callers in targets/ and
// harness/docker until they call durable directly.
//
// Deprecated: use durable.WriteFile.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	return durable.WriteFile(path, data, perm)
}

// WriteFileFrom is durable.WriteFileFrom.
//
// Deprecated: use durable.WriteFileFrom.
func WriteFileFrom(path string, perm os.FileMode, fill func(io.Writer) error) error {
	return durable.WriteFileFrom(path, perm, fill)
}

// TempFiles is durable.TempFiles.
//
// Deprecated: use durable.TempFiles.
func TempFiles(path string) []string { return durable.TempFiles(path) }
