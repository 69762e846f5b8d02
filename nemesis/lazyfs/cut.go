package lazyfs

import (
	"syscall"
	"time"
)

// A power cut timed by the next fsync (ArmCut): the crash point ALICE and
// LazyFS test ("crash before fsync"). Whatever a system wrote since its
// last fsync is unsynced at that instant, so a system that answered for
// those writes before syncing them (a group commit that replies, then
// syncs) loses what it answered, while a system that answers only after
// its fsync returns loses only what it never answered. A cut sent from
// outside after an acknowledgement lands a few milliseconds late, by when
// the fsync that followed the answer has made it durable; armed on the
// layer, it lands on the next fsync, before that fsync completes.

// cutHold bounds how long an fsync met by an armed cut is held before it
// fails with EIO: the kill follows within milliseconds, and a process
// killed while its fsync is held never sees the error. Held longer, a kill
// that waits for the process to end (an in-process node waits for its
// snapshot writer) would wait for the hold.
const cutHold = 250 * time.Millisecond

// fsyncCut is an armed power cut (l.mu guards it).
type fsyncCut struct {
	until   time.Time // armed until then; an fsync after it is a plain fsync
	fired   bool
	release chan struct{}
}

// ArmCut arms a power cut for the next fsync (of a file or a folder) within
// window: that fsync makes nothing durable, and nothing after it reaches
// the backing folder, as if the power went while it was under way (after
// a slow disk's delay, before its data was on the disk).
// The fsync is held (cutHold at most) and then fails; the power loss that
// follows (PowerLoss, PowerLossAs) says whether the cut met an fsync
// (Loss.AtFsync). Armed again before it fired, it starts a new window.
func (m *Mount) ArmCut(window time.Duration) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.lfs == nil || m.server == nil {
		return errNotMounted
	}
	l := m.lfs
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.cut != nil && l.cut.fired {
		return nil
	}
	l.cut = &fsyncCut{until: time.Now().Add(window), release: make(chan struct{})}
	return nil
}

// meetCut is called as every fsync is about to make its data durable
// (after a slow disk's delay: an fsync under way when the power goes has
// not completed): when an armed cut is met (or has fired), the power is out
// from now on, and the fsync is held, then fails.
func (l *lfs) meetCut() (syscall.Errno, bool) {
	l.mu.Lock()
	c := l.cut
	if c == nil || !c.fired && time.Now().After(c.until) {
		l.mu.Unlock()
		return 0, false
	}
	if !c.fired {
		c.fired, l.down = true, true
	}
	l.mu.Unlock()
	t := time.NewTimer(cutHold)
	defer t.Stop()
	select {
	case <-c.release:
	case <-t.C:
	}
	return syscall.EIO, true
}

// releaseCutLocked lets go of the fsyncs a fired cut holds and says
// whether it had fired (l.mu held).
func (l *lfs) releaseCutLocked() bool {
	c := l.cut
	if c == nil {
		return false
	}
	l.cut = nil
	close(c.release)
	return c.fired
}
