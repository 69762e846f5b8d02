package memory

// The snapshot file: its checksummed envelope, and the copies the store
// keeps and reads back at start (store.go says why two).

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
)

// errCorrupt marks a snapshot that cannot be read: cut short, a bit
// flipped (its checksum), not JSON, or of another format.
var errCorrupt = errors.New("corrupt")

// envelope is the snapshot file: the state's JSON and its CRC-32C, so a
// flipped bit in a number or a name is found, not read as another state.
// A file without it (written before the checksum) is read unchecked.
type envelope struct {
	CRC32C uint32          `json:"crc32c"`
	State  json.RawMessage `json:"state"`
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func encodeSnapshot(snap snapshot) []byte {
	b := mustJSON(snap)
	return mustJSON(envelope{CRC32C: crc32.Checksum(b, castagnoli), State: b})
}

// snapshotFiles are the copies of the state the store keeps: one under
// trust-truncated-state (the sloppy store it is keeps one and trusts it).
func (s *Store) snapshotFiles() []string {
	if s.opts.Bugs.Has(TrustTruncatedState) {
		return []string{snapshotName}
	}
	return []string{snapshotName, copyName}
}

// loadSnapshot reads the copies names in dir and returns the newest good
// one, and whether another is damaged, missing or behind (to be rewritten).
// No copy at all is an empty state; none good, an error.
func loadSnapshot(dir string, names []string) (snap snapshot, repair bool, err error) {
	var errs []error
	good := 0
	for _, name := range names {
		sn, err := readSnapshot(filepath.Join(dir, name))
		switch {
		case errors.Is(err, os.ErrNotExist):
			repair = true
		case err != nil:
			errs, repair = append(errs, err), true
		default:
			if good > 0 && sn.Version != snap.Version {
				repair = true
			}
			if good == 0 || sn.Version > snap.Version {
				snap = sn
			}
			good++
		}
	}
	if good == 0 {
		return snapshot{}, false, errors.Join(errs...)
	}
	return snap, repair, nil
}

// readSnapshot reads one copy of the snapshot: a missing file is an error
// wrapping os.ErrNotExist, a damaged one an error wrapping errCorrupt.
func readSnapshot(path string) (snapshot, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return snapshot{}, err
	}
	corrupt := func(why string, args ...any) error {
		return fmt.Errorf("memory: %s is %w: %s", path, errCorrupt, fmt.Sprintf(why, args...))
	}
	var env envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return snapshot{}, corrupt("%v", err)
	}
	state := []byte(env.State)
	switch {
	case len(state) > 0:
		if sum := crc32.Checksum(state, castagnoli); sum != env.CRC32C {
			return snapshot{}, corrupt("checksum %08x, want %08x", sum, env.CRC32C)
		}
	default:
		state = b // written before the checksum
	}
	var snap snapshot
	if err := json.Unmarshal(state, &snap); err != nil {
		return snapshot{}, corrupt("%v", err)
	}
	if snap.Format != formatV1 {
		return snapshot{}, corrupt("format %d, want %d", snap.Format, formatV1)
	}
	return snap, nil
}
