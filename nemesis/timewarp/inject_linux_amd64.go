package timewarp

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// linuxProcess is a patched process. Its memory is read and its offset
// written with process_vm_readv and process_vm_writev, which need the
// ptrace permission but no stop (and, unlike /proc/PID/mem, no file
// permission: a helper with CAP_SYS_PTRACE alone reaches a process of any
// user); code is written with PTRACE_POKEDATA while the process is stopped.
type linuxProcess struct {
	pid   int
	start uint64 // tells a later process with the same pid apart
	code  uint64 // the trampoline's page
	data  uint64 // the offset's page
	opts  Options
	mu    sync.Mutex
}

func inject(pid int, opts Options) (*Process, error) {
	start, err := startTime(pid)
	if err != nil {
		return nil, fmt.Errorf("pid %d: %w", pid, err)
	}
	p := &Process{PID: pid, start: start}
	lp := &linuxProcess{pid: pid, start: start, opts: opts}
	if err := lp.withStopped(func(s *stopped) error { return lp.patch(s, p) }); err != nil {
		return nil, err
	}
	p.impl = lp
	return p, nil
}

// withStopped runs fn while every thread of the process is stopped, on an
// OS thread of its own (ptrace requests must come from the thread that
// seized). If a thread never stopped, that OS thread is not given back to
// Go: it exits with its goroutine, which detaches every tracee it holds.
func (lp *linuxProcess) withStopped(fn func(*stopped) error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		s, err := stopAll(lp.pid, lp.opts.stopTimeout())
		if err == nil {
			err = fn(s)
		}
		if s != nil && s.running {
			done <- err
			return // still locked: the thread exits
		}
		if !s.detach() {
			done <- err
			return // a tracee this thread could not let go: the thread exits
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func (lp *linuxProcess) read(addr uint64, n int) ([]byte, error) {
	return readMem(lp.pid, addr, n)
}

// write stores b into a page the process may write itself (the offset's).
// The pid is checked to be the same process first.
func (lp *linuxProcess) write(addr uint64, b []byte) error {
	if st, err := startTime(lp.pid); err != nil || st != lp.start {
		return fmt.Errorf("pid %d: the process exited", lp.pid)
	}
	local := unix.Iovec{Base: &b[0]}
	local.SetLen(len(b))
	got, err := unix.ProcessVMWritev(lp.pid, []unix.Iovec{local}, []unix.RemoteIovec{{Base: uintptr(addr), Len: len(b)}}, 0)
	if err == nil && got != len(b) {
		err = io.ErrShortWrite
	}
	if err != nil {
		return fmt.Errorf("writing pid %d at %#x: %w", lp.pid, addr, err)
	}
	return nil
}

// poke stores b anywhere in a stopped process, its code and the vDSO
// included: ptrace writes past the page protection, and the kernel copies
// such a page for this process, so no other process sees the change.
func (s *stopped) poke(addr uint64, b []byte) error {
	t := s.pick()
	if _, err := unix.PtracePokeData(t.tid, uintptr(addr), b); err != nil {
		return fmt.Errorf("writing pid %d at %#x: %w", s.pid, addr, err)
	}
	return nil
}

// patch redirects the vDSO's clock functions of a stopped process to a
// trampoline: an earlier one if the process has it, a new one otherwise.
func (lp *linuxProcess) patch(s *stopped, p *Process) error {
	maps, err := readMaps(lp.pid)
	if err != nil {
		return err
	}
	var vm *mapping
	for i := range maps {
		if maps[i].path == "[vdso]" {
			vm = &maps[i]
		}
	}
	if vm == nil {
		return fmt.Errorf("pid %d has no vDSO (booted with vdso=0?): %w", lp.pid, ErrUnsupported)
	}
	image, err := lp.read(vm.start, int(vm.end-vm.start))
	if err != nil {
		return err
	}
	v, err := parseVDSO(vm.start, image, elf.EM_X86_64)
	if err != nil {
		return err
	}
	var syms [patchRecords]symbol
	var have [patchRecords]bool
	for i, names := range amd64Entries {
		syms[i], have[i] = v.lookup(names...)
	}
	if !have[0] {
		return fmt.Errorf("pid %d: the vDSO has no clock_gettime", lp.pid)
	}

	// Patched already (by us, or by another injector from the header)?
	cg := syms[0]
	if target, ok := jumpTarget(cg.addr, v.bytesAt(cg.addr)); ok {
		hb, err := lp.read(target-headerSize, headerSize)
		if err != nil {
			return fmt.Errorf("pid %d: clock_gettime jumps to %#x, which is not ours: %w", lp.pid, target, err)
		}
		h, ok := parseHeader(hb)
		if !ok {
			return fmt.Errorf("pid %d: the vDSO's clock_gettime is already redirected by another tool", lp.pid)
		}
		lp.code, lp.data = target-headerSize, h.data
		p.Reused = true
		p.Real = realName(h.vdso)
		for i, r := range h.patches {
			if r.n > 0 {
				p.Patched = append(p.Patched, amd64EntryNames[i])
			}
		}
		return nil
	}

	// A trampoline left by an earlier Inject and Restore is taken again,
	// as is; otherwise two new pages.
	var real *relocation
	var reuse *header
	for _, m := range maps {
		if m.path == "" && m.perms == "r-xp" && m.end-m.start == pageSize {
			if hb, err := lp.read(m.start, headerSize); err == nil {
				if h, ok := parseHeader(hb); ok {
					lp.code, lp.data, reuse = m.start, h.data, h
					break
				}
			}
		}
	}
	if reuse == nil {
		site := bytes.Index(v.text(), []byte{0x0f, 0x05})
		if site < 0 {
			return fmt.Errorf("pid %d: no syscall instruction in the vDSO to run mmap with", lp.pid)
		}
		t := s.pick()
		at := v.textStart + uint64(site)
		code, err := s.syscall(t, at, unix.SYS_MMAP, nearHint(maps, vm.start), pageSize,
			unix.PROT_READ|unix.PROT_EXEC, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS, math.MaxUint64, 0)
		if err != nil {
			return fmt.Errorf("pid %d: mapping the trampoline: %w", lp.pid, err)
		}
		// MAP_SHARED: a child forked later shares the offset.
		data, err := s.syscall(t, at, unix.SYS_MMAP, 0, pageSize,
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS, math.MaxUint64, 0)
		if err != nil {
			return fmt.Errorf("pid %d: mapping the offset: %w", lp.pid, err)
		}
		lp.code, lp.data = code, data
	}

	// Where each entry jumps, how many bytes its jump takes, and whether
	// nothing branches into those bytes.
	layout, err := buildTrampoline(lp.code, lp.data, nil)
	if err != nil {
		return err
	}
	var records [patchRecords]patchRecord
	for i := range syms {
		if !have[i] {
			continue
		}
		n := patchLen(syms[i].addr, layout.entries[i])
		if uint64(n) > syms[i].size {
			continue
		}
		if err := branchesInto(v.text(), v.textStart, [][2]uint64{{syms[i].addr, syms[i].addr + uint64(n)}}); err != nil {
			if i == 0 {
				return fmt.Errorf("pid %d: cannot patch clock_gettime: %w", lp.pid, err)
			}
			continue // left alone: reads through it stay unshifted
		}
		records[i] = patchRecord{entry: syms[i].addr, n: n, orig: append([]byte(nil), v.bytesAt(syms[i].addr)[:n]...)}
	}
	if records[0].n == 0 {
		return fmt.Errorf("pid %d: the vDSO's clock_gettime is too short to patch", lp.pid)
	}

	if reuse != nil {
		real = nil
		p.Real = realName(reuse.vdso)
		p.Reused = true
	} else {
		if !lp.opts.Syscall {
			fn := v.bytesAt(cg.addr)[:cg.size]
			if rel, err := relocate(fn, cg.addr, records[0].n); err == nil {
				real = rel
			}
		}
		p.Real = realName(real != nil)
		t, err := buildTrampoline(lp.code, lp.data, real)
		if err != nil {
			return err
		}
		if err := s.poke(lp.code, t.page); err != nil {
			return err
		}
	}
	for i, r := range records {
		if err := s.poke(lp.code+patchRecordAt(i), encodePatchRecord(r)); err != nil {
			return err
		}
	}

	// No thread may stand inside the bytes about to be overwritten.
	if err := s.stepOutOf(records[:]); err != nil {
		return err
	}
	for i, r := range records {
		if r.n == 0 {
			continue
		}
		if err := s.poke(r.entry, patchBytes(r.entry, layout.entries[i], r.n)); err != nil {
			return err
		}
		p.Patched = append(p.Patched, amd64EntryNames[i])
	}
	return nil
}

func realName(vdso bool) string {
	if vdso {
		return RealVDSO
	}
	return RealSyscall
}

// nearHint finds a free page within 1 GiB of addr (the vDSO), so that a
// 5-byte jump reaches the trampoline; 0 lets the kernel choose (the jump
// then takes 12 bytes).
func nearHint(maps []mapping, addr uint64) uint64 {
	const reach = 1 << 30
	sorted := append([]mapping(nil), maps...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].start < sorted[j].start })
	var best uint64
	bestDist := uint64(math.MaxUint64)
	prevEnd := uint64(1 << 20)
	for _, m := range sorted {
		if m.start >= 1<<47 {
			break
		}
		if m.start > prevEnd+4*pageSize {
			// A page of room on both sides of the new one.
			c := prevEnd + pageSize
			if m.start <= addr {
				c = m.start - 2*pageSize
			}
			d := max(c, addr) - min(c, addr)
			if d < reach && d < bestDist {
				best, bestDist = c, d
			}
		}
		prevEnd = max(prevEnd, m.end)
	}
	return best
}

// pick is the thread to run injected system calls on: one that stopped
// cleanly (no signal to deliver, not group-stopped) if there is one.
func (s *stopped) pick() *thread {
	for _, tid := range s.order {
		if t := s.threads[tid]; t.pending == 0 && !t.group {
			return t
		}
	}
	return s.threads[s.order[0]]
}

// syscall runs one system call in the stopped thread t: its registers are
// set for the call at site (a syscall instruction), it is stepped over that
// one instruction, and its registers are put back. orig_rax -1 keeps the
// kernel from restarting a system call the thread was interrupted in; the
// restored registers restart it later as they would have.
func (s *stopped) syscall(t *thread, site uint64, nr uintptr, args ...uint64) (uint64, error) {
	var saved unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &saved); err != nil {
		return 0, fmt.Errorf("reading the registers of thread %d: %w", t.tid, err)
	}
	regs := saved
	regs.Rax, regs.Orig_rax, regs.Rip = uint64(nr), math.MaxUint64, site
	for i, dst := range []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9} {
		if i < len(args) {
			*dst = args[i]
		}
	}
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		return 0, fmt.Errorf("setting the registers of thread %d: %w", t.tid, err)
	}
	defer unix.PtraceSetRegs(t.tid, &saved)
	if err := s.step(t); err != nil {
		return 0, err
	}
	var out unix.PtraceRegs
	if err := unix.PtraceGetRegs(t.tid, &out); err != nil {
		return 0, err
	}
	if out.Rip != site+2 {
		return 0, fmt.Errorf("the injected system call did not run (thread %d at %#x)", t.tid, out.Rip)
	}
	if r := int64(out.Rax); r < 0 && r > -4096 {
		return 0, syscall.Errno(-r)
	}
	return out.Rax, nil
}

// stepOutOf single-steps any thread that stopped inside the bytes a patch
// will overwrite (past the entry) until it is out of them.
func (s *stopped) stepOutOf(records []patchRecord) error {
	inside := func(rip uint64) bool {
		for _, r := range records {
			if r.n > 0 && rip > r.entry && rip < r.entry+uint64(r.n) {
				return true
			}
		}
		return false
	}
	for _, tid := range append([]int(nil), s.order...) {
		t := s.threads[tid]
		for steps := 0; ; steps++ {
			var regs unix.PtraceRegs
			if err := unix.PtraceGetRegs(tid, &regs); err != nil {
				break // gone
			}
			if !inside(regs.Rip) {
				break
			}
			if steps == 32 {
				return fmt.Errorf("thread %d stays inside the vDSO's entry", tid)
			}
			if err := s.step(t); err != nil {
				return err
			}
		}
	}
	return nil
}

// setOffset writes the offset, once the trampoline is seen to be still
// there: a process that exec'd another program since has another memory,
// where the old address may hold anything.
func (lp *linuxProcess) setOffset(d time.Duration) error {
	hb, err := lp.read(lp.code, headerSize)
	if err != nil {
		return errExecd(lp.pid, err)
	}
	if h, ok := parseHeader(hb); !ok || h.data != lp.data {
		return errExecd(lp.pid, nil)
	}
	b := binary.LittleEndian.AppendUint64(nil, uint64(d))
	return lp.write(lp.data+dataOffset, b)
}

func errExecd(pid int, err error) error {
	if err != nil {
		return fmt.Errorf("pid %d: the trampoline is gone (the process exec'd another program?): %w", pid, err)
	}
	return fmt.Errorf("pid %d: the trampoline is gone (the process exec'd another program?)", pid)
}

func (lp *linuxProcess) offset() (time.Duration, error) {
	b, err := lp.read(lp.data+dataOffset, 8)
	if err != nil {
		return 0, err
	}
	return time.Duration(int64(binary.LittleEndian.Uint64(b))), nil
}

func (lp *linuxProcess) reads() (uint64, error) {
	b, err := lp.read(lp.data+dataReads, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(b), nil
}

func (lp *linuxProcess) restore() error {
	lp.mu.Lock()
	defer lp.mu.Unlock()
	if err := lp.setOffset(0); err != nil {
		return err
	}
	hb, err := lp.read(lp.code, headerSize)
	if err != nil {
		return err
	}
	h, ok := parseHeader(hb)
	if !ok {
		return fmt.Errorf("pid %d: the trampoline's header is gone", lp.pid)
	}
	layout, err := buildTrampoline(lp.code, lp.data, nil)
	if err != nil {
		return err
	}
	// A jump is one instruction: a stopped thread is before it or past
	// it, never inside, so the original bytes can go back at once.
	return lp.withStopped(func(s *stopped) error {
		for i, r := range h.patches {
			if r.n == 0 {
				continue
			}
			cur, err := lp.read(r.entry, r.n)
			if err != nil {
				return err
			}
			if to, ok := jumpTarget(r.entry, cur); !ok || to != layout.entries[i] {
				continue // not ours (any more)
			}
			if err := s.poke(r.entry, r.orig); err != nil {
				return err
			}
		}
		return nil
	})
}

func (lp *linuxProcess) close() error { return nil }
