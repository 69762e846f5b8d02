package timewarp

import (
	"encoding/binary"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/arch/x86/x86asm"
)

// disassemble lists code at org in Intel syntax, one instruction a line,
// up to and including the first `jmp qword ptr [rip]` (which is followed by
// its target, data, not code).
func disassemble(t *testing.T, code []byte, org uint64) (string, int) {
	t.Helper()
	var b strings.Builder
	off := 0
	for off < len(code) {
		inst, err := x86asm.Decode(code[off:], 64)
		require.NoError(t, err, "at %#x", off)
		text := x86asm.IntelSyntax(inst, org+uint64(off), nil)
		fmt.Fprintf(&b, "%#x %s\n", off, text)
		off += inst.Len
		if text == "jmp qword ptr [rip]" {
			break
		}
	}
	return b.String(), off
}

// The hand-assembled trampoline, disassembled: every encoding says what
// its comment in buildTrampoline says.
func TestTrampolineListing(t *testing.T) {
	const code, data = 0x10000, 0x20000
	real := &relocation{entry: 0x5000, code: []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x56}}
	tr, err := buildTrampoline(code, data, real)
	require.NoError(t, err)
	got, end := disassemble(t, tr.page[headerSize:], code+headerSize)
	want := `0x0 test edi, edi
0x2 jz 0x1008d
0x4 cmp edi, 0x5
0x7 jnz 0x10155
0xd push rsi
0xe call 0x10155
0x13 pop rsi
0x14 test eax, eax
0x16 jnz 0x100e3
0x18 mov r8, 0x20000
0x22 mov rcx, qword ptr [r8]
0x25 test rcx, rcx
0x28 jz 0x100e3
0x2a inc qword ptr [r8+0x8]
0x2e mov rax, rcx
0x31 cqo
0x33 mov ecx, 0x3b9aca00
0x38 idiv rcx
0x3b add rdx, qword ptr [rsi+0x8]
0x3f add rax, qword ptr [rsi]
0x42 test rdx, rdx
0x45 jns 0x100cf
0x47 add rdx, rcx
0x4a dec rax
0x4d jmp 0x100da
0x4f cmp rdx, rcx
0x52 jl 0x100da
0x54 sub rdx, rcx
0x57 inc rax
0x5a mov qword ptr [rsi], rax
0x5d mov qword ptr [rsi+0x8], rdx
0x61 xor eax, eax
0x63 ret
0x64 test rsi, rsi
0x67 jz 0x100f4
0x69 push rdi
0x6a xor edi, edi
0x6c mov eax, 0x60
0x71 syscall
0x73 pop rdi
0x74 test rdi, rdi
0x77 jz 0x1012b
0x79 push rdi
0x7a sub rsp, 0x10
0x7e xor edi, edi
0x80 mov rsi, rsp
0x83 call 0x10080
0x88 test eax, eax
0x8a jnz 0x1012e
0x8c mov rax, qword ptr [rsp+0x8]
0x91 xor edx, edx
0x93 mov ecx, 0x3e8
0x98 div rcx
0x9b mov rdx, qword ptr [rsp]
0x9f add rsp, 0x10
0xa3 pop rdi
0xa4 mov qword ptr [rdi], rdx
0xa7 mov qword ptr [rdi+0x8], rax
0xab xor eax, eax
0xad ret
0xae add rsp, 0x10
0xb2 pop rdi
0xb3 ret
0xb4 push rdi
0xb5 sub rsp, 0x10
0xb9 xor edi, edi
0xbb mov rsi, rsp
0xbe call 0x10080
0xc3 mov rax, qword ptr [rsp]
0xc7 add rsp, 0x10
0xcb pop rdi
0xcc test rdi, rdi
0xcf jz 0x10154
0xd1 mov qword ptr [rdi], rax
0xd4 ret
0xd5 push rbp
0xd6 mov rbp, rsp
0xd9 push r14
0xdb jmp qword ptr [rip]
`
	assert.Equal(t, want, got)
	// The copied prologue jumps back past itself.
	assert.Equal(t, uint64(0x5006), binary.LittleEndian.Uint64(tr.page[headerSize+end:]))
	assert.Equal(t, [3]uint64{code + headerSize, code + headerSize + 0x64, code + headerSize + 0xb4}, tr.entries)

	h, ok := parseHeader(tr.page)
	require.True(t, ok)
	assert.Equal(t, uint64(data), h.data)
	assert.True(t, h.vdso)

	// Without a relocation the real clock is the system call.
	sys, err := buildTrampoline(code, data, nil)
	require.NoError(t, err)
	tail, _ := disassemble(t, sys.page[headerSize+0xd5:], code+headerSize+0xd5)
	assert.Equal(t, "0x0 mov eax, 0xe4\n0x5 syscall\n0x7 ret\n", tail)
	assert.Equal(t, tr.entries, sys.entries, "the entry points do not depend on the real clock's variant")
}

func TestPatchJumps(t *testing.T) {
	for _, c := range []struct {
		entry, target uint64
		n             int
	}{
		{0x7f0000001000, 0x7f0000100000, nearPatchLen},
		{0x7f0000100000, 0x7f0000001000, nearPatchLen},
		{0x7ffff7fc1000, 0x555555554000, farPatchLen},
	} {
		n := patchLen(c.entry, c.target)
		require.Equal(t, c.n, n)
		b := patchBytes(c.entry, c.target, n)
		require.Len(t, b, n)
		to, ok := jumpTarget(c.entry, b)
		require.True(t, ok)
		assert.Equal(t, c.target, to)
		inst, err := x86asm.Decode(b, 64)
		require.NoError(t, err)
		assert.Equal(t, x86asm.JMP, func() x86asm.Op {
			if n == farPatchLen {
				next, err := x86asm.Decode(b[inst.Len:], 64)
				require.NoError(t, err)
				return next.Op
			}
			return inst.Op
		}())
	}
	_, ok := jumpTarget(0x1000, []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x56, 0, 0, 0, 0, 0, 0})
	assert.False(t, ok, "a prologue is no jump")
}

func TestRelocate(t *testing.T) {
	// x86-64 vDSO clock_gettime of Linux 6.18: push rbp; mov rbp, rsp;
	// push r14; push rbx; and rsp, -16; sub rsp, 16; cmp edi, 0x17
	fn := []byte{0x55, 0x48, 0x89, 0xe5, 0x41, 0x56, 0x53, 0x48, 0x83, 0xe4, 0xf0, 0x48, 0x83, 0xec, 0x10, 0x83, 0xff, 0x17}
	r, err := relocate(fn, 0x1000, nearPatchLen)
	require.NoError(t, err)
	assert.Equal(t, fn[:6], r.code, "whole instructions, at least 5 bytes")
	r, err = relocate(fn, 0x1000, farPatchLen)
	require.NoError(t, err)
	assert.Equal(t, fn[:15], r.code)

	// Its gettimeofday: push rbp; lea r10, [rip-0x6818]: PC-relative.
	_, err = relocate([]byte{0x55, 0x4c, 0x8d, 0x15, 0xe8, 0x97, 0xff, 0xff, 0x48, 0x89, 0xe5}, 0x2000, nearPatchLen)
	assert.ErrorContains(t, err, "PC-relative")
	// A branch among the first bytes.
	_, err = relocate([]byte{0x85, 0xff, 0x74, 0x10, 0x90, 0x90, 0x90}, 0x3000, nearPatchLen)
	assert.Error(t, err)
	_, err = relocate([]byte{0x55, 0xc3}, 0x3000, nearPatchLen)
	assert.Error(t, err, "shorter than the patch")
}

func TestBranchesInto(t *testing.T) {
	// 0x0: jmp 0x12 (to 0x10 + 2: inside a patch at 0x10..0x15)
	text := append([]byte{0xeb, 0x10}, make([]byte, 0x20)...)
	for i := 2; i < len(text); i++ {
		text[i] = 0x90
	}
	err := branchesInto(text, 0, [][2]uint64{{0x10, 0x15}})
	assert.ErrorContains(t, err, "branches into")
	assert.NoError(t, branchesInto(text, 0, [][2]uint64{{0x12, 0x17}}), "a branch to the entry itself is fine")
	assert.NoError(t, branchesInto(text, 0, [][2]uint64{{0x18, 0x1d}}))
}
