package timewarp

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"

	"golang.org/x/arch/x86/x86asm"
)

// The trampoline's code page: a header an injector can read back (how the
// process was patched, so another injector can take it over or restore it),
// then the code.
//
//	0x00  magic "FCWARP01"
//	0x08  address of the data page
//	0x10  how the real clock is read (1 vdso, 0 syscall)
//	0x18  3 patch records of 32 bytes: entry address, length, original bytes (16)
//	0x80  fake clock_gettime (the address the patched entry jumps to), then
//	      fake gettimeofday, fake time, and the real clock_gettime
//
// The data page, shared with children forked later (MAP_SHARED), holds the
// offset in nanoseconds at 0 and the count of shifted reads at 8.
const (
	pageSize       = 4096
	headerSize     = 0x80
	patchRecords   = 3
	patchRecordLen = 32
	dataOffset     = 0
	dataReads      = 8
)

var magic = [8]byte{'F', 'C', 'W', 'A', 'R', 'P', '0', '1'}

// The vDSO functions that are redirected, with the names the x86-64 vDSO
// exports them under (the bare names are weak aliases at the same address).
var amd64Entries = [patchRecords][]string{
	{"__vdso_clock_gettime", "clock_gettime"},
	{"__vdso_gettimeofday", "gettimeofday"},
	{"__vdso_time", "time"},
}

var amd64EntryNames = [patchRecords]string{"clock_gettime", "gettimeofday", "time"}

// Patch lengths at a vDSO entry: jmp rel32 when the trampoline is within
// ±2 GiB, else movabs rax, imm64; jmp rax (rax is free at a function's
// entry: it carries no argument).
const (
	nearPatchLen = 5
	farPatchLen  = 12
)

func patchLen(entry, target uint64) int {
	d := int64(target) - int64(entry+nearPatchLen)
	if d >= -1<<31 && d < 1<<31 {
		return nearPatchLen
	}
	return farPatchLen
}

// patchBytes is the jump written over a vDSO entry.
func patchBytes(entry, target uint64, n int) []byte {
	if n == nearPatchLen {
		b := []byte{0xe9, 0, 0, 0, 0}
		binary.LittleEndian.PutUint32(b[1:], uint32(int32(int64(target)-int64(entry+nearPatchLen))))
		return b
	}
	b := make([]byte, farPatchLen)
	b[0], b[1] = 0x48, 0xb8
	binary.LittleEndian.PutUint64(b[2:], target)
	b[10], b[11] = 0xff, 0xe0
	return b
}

// jumpTarget decodes a jump that patchBytes wrote at entry.
func jumpTarget(entry uint64, b []byte) (uint64, bool) {
	if len(b) >= nearPatchLen && b[0] == 0xe9 {
		return uint64(int64(entry+nearPatchLen) + int64(int32(binary.LittleEndian.Uint32(b[1:])))), true
	}
	if len(b) >= farPatchLen && b[0] == 0x48 && b[1] == 0xb8 && b[10] == 0xff && b[11] == 0xe0 {
		return binary.LittleEndian.Uint64(b[2:]), true
	}
	return 0, false
}

// relocation is the start of the vDSO's clock_gettime, copied into the
// trampoline so that the real function can still be called once its first
// bytes are a jump: the copy runs, then jumps back to entry+len(code).
type relocation struct {
	entry uint64
	code  []byte
}

// relocate proves that the first instructions of fn (at least need bytes)
// can run anywhere: none is PC-relative or a branch. Anything else, or an
// instruction the decoder does not know, and the trampoline uses the system
// call instead.
func relocate(fn []byte, entry uint64, need int) (*relocation, error) {
	n := 0
	for n < need {
		if n >= len(fn) {
			return nil, errors.New("the function is shorter than the patch")
		}
		inst, err := x86asm.Decode(fn[n:], 64)
		if err != nil {
			return nil, fmt.Errorf("decoding the vDSO at %#x: %w", entry+uint64(n), err)
		}
		if inst.PCRel != 0 {
			return nil, fmt.Errorf("%v at %#x is PC-relative", inst, entry+uint64(n))
		}
		switch inst.Op {
		case x86asm.RET, x86asm.CALL, x86asm.JMP, x86asm.LCALL, x86asm.LJMP, x86asm.LRET,
			x86asm.SYSCALL, x86asm.INT, x86asm.UD1, x86asm.UD2, x86asm.IRET, x86asm.IRETQ:
			return nil, fmt.Errorf("%v at %#x changes the flow", inst, entry+uint64(n))
		}
		n += inst.Len
	}
	return &relocation{entry: entry, code: append([]byte(nil), fn[:n]...)}, nil
}

// branchesInto finds a direct branch anywhere in the vDSO's code that lands
// strictly inside one of the ranges (the bytes a patch overwrites, past the
// entry itself): such a branch would land in the middle of the jump.
func branchesInto(text []byte, textAddr uint64, ranges [][2]uint64) error {
	for _, b := range branchTargets(text) {
		to := textAddr + b.to
		for _, r := range ranges {
			if to > r[0] && to < r[1] {
				return fmt.Errorf("%s at %#x branches into the patched bytes at %#x", b.inst, textAddr+b.at, r[0])
			}
		}
	}
	return nil
}

type branch struct {
	at, to uint64 // offsets in the text
	inst   string
}

// Every process of one kernel has the same vDSO: its branches are found
// once (a sweep takes a quarter of a millisecond).
var branchCache struct {
	sync.Mutex
	m map[[32]byte][]branch
}

// branchTargets lists the direct branches of the code, sweeping it
// linearly: the vDSO holds no data in its text, and a byte the decoder
// does not know is stepped over.
func branchTargets(text []byte) []branch {
	key := sha256.Sum256(text)
	branchCache.Lock()
	defer branchCache.Unlock()
	if b, ok := branchCache.m[key]; ok {
		return b
	}
	var out []branch
	for off := 0; off < len(text); {
		inst, err := x86asm.Decode(text[off:], 64)
		if err != nil {
			off++
			continue
		}
		for _, a := range inst.Args {
			if rel, ok := a.(x86asm.Rel); ok {
				out = append(out, branch{at: uint64(off), to: uint64(int64(off) + int64(inst.Len) + int64(rel)), inst: inst.String()})
			}
		}
		off += inst.Len
	}
	if branchCache.m == nil {
		branchCache.m = map[[32]byte][]branch{}
	}
	branchCache.m[key] = out
	return out
}

// asm assembles the trampoline: bytes with labels and rel8/rel32 fixups.
type asm struct {
	org    uint64 // address of buf[0] in the process
	buf    []byte
	labels map[string]int
	fixups []fixup
}

type fixup struct {
	at, size int // where the displacement goes, and its size (1 or 4)
	label    string
}

func newAsm(org uint64) *asm { return &asm{org: org, labels: map[string]int{}} }

func (a *asm) emit(b ...byte) { a.buf = append(a.buf, b...) }
func (a *asm) mark(label string) {
	a.labels[label] = len(a.buf)
}
func (a *asm) addr(label string) uint64 { return a.org + uint64(a.labels[label]) }

// jump8 emits a short branch (opcode + rel8) to label.
func (a *asm) jump8(op byte, label string) {
	a.emit(op, 0)
	a.fixups = append(a.fixups, fixup{at: len(a.buf) - 1, size: 1, label: label})
}

// jump32 emits op (call E8, jmp E9, or 0F 8x) with a rel32 to label.
func (a *asm) jump32(label string, op ...byte) {
	a.emit(op...)
	a.emit(0, 0, 0, 0)
	a.fixups = append(a.fixups, fixup{at: len(a.buf) - 4, size: 4, label: label})
}

func (a *asm) imm32(v uint32) { a.buf = binary.LittleEndian.AppendUint32(a.buf, v) }
func (a *asm) imm64(v uint64) { a.buf = binary.LittleEndian.AppendUint64(a.buf, v) }

func (a *asm) finish() ([]byte, error) {
	for _, f := range a.fixups {
		to, ok := a.labels[f.label]
		if !ok {
			return nil, fmt.Errorf("trampoline: no label %q", f.label)
		}
		d := to - (f.at + f.size)
		switch f.size {
		case 1:
			if d < -128 || d > 127 {
				return nil, fmt.Errorf("trampoline: %q is out of rel8 reach", f.label)
			}
			a.buf[f.at] = byte(int8(d))
		case 4:
			binary.LittleEndian.PutUint32(a.buf[f.at:], uint32(int32(d)))
		}
	}
	return a.buf, nil
}

// trampoline is the code page's content and the entry points inside it.
type trampoline struct {
	page []byte
	// entries are the addresses the three patched functions jump to, in
	// amd64Entries order.
	entries [patchRecords]uint64
}

// buildTrampoline writes the code for a code page at codeAddr whose offset
// lives at dataAddr. real is nil for the system-call variant.
//
// The functions follow the C calling convention the vDSO has (and Go's
// runtime relies on): arguments in rdi and rsi, result in rax, rbx, rbp,
// rsp and r12-r15 preserved. They use rax, rcx, rdx, rsi, rdi and r8 only,
// no vector register, and at most 24 bytes of stack (Go calls the vDSO on a
// small system stack).
func buildTrampoline(codeAddr, dataAddr uint64, real *relocation) (*trampoline, error) {
	a := newAsm(codeAddr + headerSize)
	const billion = 1_000_000_000

	// int clock_gettime(clockid_t clk /*edi*/, struct timespec *ts /*rsi*/)
	a.mark("clock_gettime")
	a.emit(0x85, 0xff)           // test edi, edi            CLOCK_REALTIME (0)?
	a.jump8(0x74, "shift")       // je shift
	a.emit(0x83, 0xff, 0x05)     // cmp edi, 5               CLOCK_REALTIME_COARSE?
	a.jump32("real", 0x0f, 0x85) // jne real              any other clock: a tail call
	a.mark("shift")
	a.emit(0x56)           // push rsi                 (aligns the stack for the call)
	a.jump32("real", 0xe8) // call real
	a.emit(0x5e)           // pop rsi
	a.emit(0x85, 0xc0)     // test eax, eax
	a.jump8(0x75, "done")  // jne done                 an error: return it as is
	a.emit(0x49, 0xb8)     // movabs r8, dataAddr
	a.imm64(dataAddr)
	a.emit(0x49, 0x8b, 0x08)            // mov rcx, [r8]            the offset
	a.emit(0x48, 0x85, 0xc9)            // test rcx, rcx
	a.jump8(0x74, "done")               // je done                  0: real time (eax is 0)
	a.emit(0x49, 0xff, 0x40, dataReads) // inc qword [r8+8]  count a shifted read
	a.emit(0x48, 0x89, 0xc8)            // mov rax, rcx
	a.emit(0x48, 0x99)                  // cqo
	a.emit(0xb9)                        // mov ecx, 1e9
	a.imm32(billion)
	a.emit(0x48, 0xf7, 0xf9)       // idiv rcx                 rax = s, rdx = ns (sign of the offset)
	a.emit(0x48, 0x03, 0x56, 0x08) // add rdx, [rsi+8]    tv_nsec + ns, in (-1e9, 2e9)
	a.emit(0x48, 0x03, 0x06)       // add rax, [rsi]           tv_sec + s
	a.emit(0x48, 0x85, 0xd2)       // test rdx, rdx
	a.jump8(0x79, "nonneg")        // jns nonneg
	a.emit(0x48, 0x01, 0xca)       // add rdx, rcx             borrow a second
	a.emit(0x48, 0xff, 0xc8)       // dec rax
	a.jump8(0xeb, "store")         // jmp store
	a.mark("nonneg")
	a.emit(0x48, 0x39, 0xca) // cmp rdx, rcx
	a.jump8(0x7c, "store")   // jl store
	a.emit(0x48, 0x29, 0xca) // sub rdx, rcx             carry a second
	a.emit(0x48, 0xff, 0xc0) // inc rax
	a.mark("store")
	a.emit(0x48, 0x89, 0x06)       // mov [rsi], rax
	a.emit(0x48, 0x89, 0x56, 0x08) // mov [rsi+8], rdx
	a.emit(0x31, 0xc0)             // xor eax, eax
	a.mark("done")
	a.emit(0xc3) // ret

	// int gettimeofday(struct timeval *tv /*rdi*/, struct timezone *tz /*rsi*/):
	// the shifted CLOCK_REALTIME in microseconds; a time zone, which hardly
	// anyone asks for, comes from the system call.
	a.mark("gettimeofday")
	a.emit(0x48, 0x85, 0xf6) // test rsi, rsi
	a.jump8(0x74, "notz")    // je notz
	a.emit(0x57)             // push rdi
	a.emit(0x31, 0xff)       // xor edi, edi             gettimeofday(NULL, tz)
	a.emit(0xb8)             // mov eax, SYS_gettimeofday
	a.imm32(96)
	a.emit(0x0f, 0x05) // syscall
	a.emit(0x5f)       // pop rdi
	a.mark("notz")
	a.emit(0x48, 0x85, 0xff)             // test rdi, rdi
	a.jump8(0x74, "tvok")                // je tvok                  no tv: nothing else to do
	a.emit(0x57)                         // push rdi
	a.emit(0x48, 0x83, 0xec, 0x10)       // sub rsp, 16         a timespec
	a.emit(0x31, 0xff)                   // xor edi, edi             CLOCK_REALTIME
	a.emit(0x48, 0x89, 0xe6)             // mov rsi, rsp
	a.jump32("clock_gettime", 0xe8)      // call clock_gettime (the shifted one)
	a.emit(0x85, 0xc0)                   // test eax, eax
	a.jump8(0x75, "tvfail")              // jne tvfail
	a.emit(0x48, 0x8b, 0x44, 0x24, 0x08) // mov rax, [rsp+8]  ns
	a.emit(0x31, 0xd2)                   // xor edx, edx
	a.emit(0xb9)                         // mov ecx, 1000
	a.imm32(1000)
	a.emit(0x48, 0xf7, 0xf1)       // div rcx                  rax = µs
	a.emit(0x48, 0x8b, 0x14, 0x24) // mov rdx, [rsp]      s
	a.emit(0x48, 0x83, 0xc4, 0x10) // add rsp, 16
	a.emit(0x5f)                   // pop rdi
	a.emit(0x48, 0x89, 0x17)       // mov [rdi], rdx
	a.emit(0x48, 0x89, 0x47, 0x08) // mov [rdi+8], rax
	a.mark("tvok")
	a.emit(0x31, 0xc0) // xor eax, eax
	a.emit(0xc3)       // ret
	a.mark("tvfail")
	a.emit(0x48, 0x83, 0xc4, 0x10) // add rsp, 16
	a.emit(0x5f)                   // pop rdi
	a.emit(0xc3)                   // ret

	// time_t time(time_t *t /*rdi*/): the shifted CLOCK_REALTIME's seconds.
	a.mark("time")
	a.emit(0x57)                    // push rdi
	a.emit(0x48, 0x83, 0xec, 0x10)  // sub rsp, 16
	a.emit(0x31, 0xff)              // xor edi, edi
	a.emit(0x48, 0x89, 0xe6)        // mov rsi, rsp
	a.jump32("clock_gettime", 0xe8) // call clock_gettime
	a.emit(0x48, 0x8b, 0x04, 0x24)  // mov rax, [rsp]
	a.emit(0x48, 0x83, 0xc4, 0x10)  // add rsp, 16
	a.emit(0x5f)                    // pop rdi
	a.emit(0x48, 0x85, 0xff)        // test rdi, rdi
	a.jump8(0x74, "tret")           // je tret
	a.emit(0x48, 0x89, 0x07)        // mov [rdi], rax
	a.mark("tret")
	a.emit(0xc3) // ret

	// The real clock_gettime.
	a.mark("real")
	if real != nil {
		a.emit(real.code...)           // the vDSO's first instructions
		a.emit(0xff, 0x25, 0, 0, 0, 0) // jmp [rip+0]         back into the vDSO
		a.imm64(real.entry + uint64(len(real.code)))
	} else {
		a.emit(0xb8) // mov eax, SYS_clock_gettime
		a.imm32(228)
		a.emit(0x0f, 0x05) // syscall
		a.emit(0xc3)       // ret
	}

	code, err := a.finish()
	if err != nil {
		return nil, err
	}
	if headerSize+len(code) > pageSize {
		return nil, errors.New("trampoline: larger than a page")
	}
	t := &trampoline{page: make([]byte, headerSize+len(code))}
	copy(t.page, magic[:])
	binary.LittleEndian.PutUint64(t.page[8:], dataAddr)
	if real != nil {
		binary.LittleEndian.PutUint64(t.page[16:], 1)
	}
	copy(t.page[headerSize:], code)
	for i, l := range []string{"clock_gettime", "gettimeofday", "time"} {
		t.entries[i] = a.addr(l)
	}
	return t, nil
}

// header is what a code page says about the patch it belongs to.
type header struct {
	data    uint64
	vdso    bool
	patches [patchRecords]patchRecord
}

type patchRecord struct {
	entry uint64
	n     int
	orig  []byte
}

func parseHeader(b []byte) (*header, bool) {
	if len(b) < headerSize || [8]byte(b[:8]) != magic {
		return nil, false
	}
	h := &header{data: binary.LittleEndian.Uint64(b[8:]), vdso: binary.LittleEndian.Uint64(b[16:]) == 1}
	for i := range h.patches {
		r := b[0x18+i*patchRecordLen:]
		n := int(binary.LittleEndian.Uint64(r[8:]))
		if n > 16 {
			return nil, false
		}
		h.patches[i] = patchRecord{entry: binary.LittleEndian.Uint64(r), n: n, orig: append([]byte(nil), r[16:16+n]...)}
	}
	return h, true
}

// encodePatchRecord is the header bytes of patch record i.
func encodePatchRecord(r patchRecord) []byte {
	b := make([]byte, patchRecordLen)
	binary.LittleEndian.PutUint64(b, r.entry)
	binary.LittleEndian.PutUint64(b[8:], uint64(r.n))
	copy(b[16:], r.orig)
	return b
}

func patchRecordAt(i int) uint64 { return uint64(0x18 + i*patchRecordLen) }
