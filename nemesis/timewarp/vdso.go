package timewarp

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
)

// vdso is a process's vDSO as read from its memory: the ELF image the
// kernel maps into every process, with the clock functions fencecheck
// redirects.
type vdso struct {
	base uint64 // where the image is mapped
	data []byte
	// bias turns an ELF address into a process address.
	bias uint64
	// text is the code section, in process addresses.
	textStart, textEnd uint64
	syms               map[string]symbol
}

type symbol struct {
	addr, size uint64
}

func parseVDSO(base uint64, data []byte, machine elf.Machine) (*vdso, error) {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("reading the vDSO: %w", err)
	}
	if f.Class != elf.ELFCLASS64 || f.Machine != machine {
		return nil, fmt.Errorf("the vDSO is %v %v, not a 64-bit %v image", f.Class, f.Machine, machine)
	}
	v := &vdso{base: base, data: data, syms: map[string]symbol{}}
	found := false
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			v.bias = base - (p.Vaddr - p.Off)
			found = true
			break
		}
	}
	if !found {
		return nil, errors.New("the vDSO has no loadable segment")
	}
	text := f.Section(".text")
	if text == nil {
		return nil, errors.New("the vDSO has no .text section")
	}
	v.textStart, v.textEnd = text.Addr+v.bias, text.Addr+text.Size+v.bias
	syms, err := f.DynamicSymbols()
	if err != nil {
		return nil, fmt.Errorf("the vDSO's symbols: %w", err)
	}
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && s.Value != 0 {
			v.syms[s.Name] = symbol{addr: s.Value + v.bias, size: s.Size}
		}
	}
	if v.textStart < base || v.textEnd > base+uint64(len(data)) {
		return nil, errors.New("the vDSO's code lies outside its mapping")
	}
	return v, nil
}

// lookup returns the first of names the vDSO defines.
func (v *vdso) lookup(names ...string) (symbol, bool) {
	for _, n := range names {
		if s, ok := v.syms[n]; ok && s.size > 0 {
			return s, true
		}
	}
	return symbol{}, false
}

// bytesAt returns the image's bytes from addr to the end of the code.
func (v *vdso) bytesAt(addr uint64) []byte {
	if addr < v.textStart || addr >= v.textEnd {
		return nil
	}
	return v.data[addr-v.base : v.textEnd-v.base]
}

// text returns the code section's bytes.
func (v *vdso) text() []byte { return v.data[v.textStart-v.base : v.textEnd-v.base] }
