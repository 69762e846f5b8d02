package lazyfs_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// BenchmarkLayer: what the layer costs in setup (a server started, its
// mount made and taken down; and a power loss: unmount and mount again over
// a small data folder) and per durable write (write a small file and fsync
// it, with the folder, on a plain folder and on the layer side by side). The
// layer is served by a child process (lazyfstest), as a run's are by its
// local agent: "mount" includes that process's start.
//
//	go test ./nemesis/lazyfs -run '^$' -bench Layer
func BenchmarkLayer(b *testing.B) {
	if err := lazyfs.Supported(); err != nil {
		b.Fatal(err)
	}
	b.Run("mount", func(b *testing.B) {
		root := b.TempDir()
		for i := 0; i < b.N; i++ {
			m := lazyfstest.Start(b, lazyfstest.Spec{Backing: filepath.Join(root, "backing"), Mount: filepath.Join(root, "mnt")})
			if err := m.Unmount(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("power-loss", func(b *testing.B) {
		root := b.TempDir()
		m := lazyfstest.Start(b, lazyfstest.Spec{Backing: filepath.Join(root, "backing"), Mount: filepath.Join(root, "mnt")})
		for i := 0; i < 10; i++ {
			if err := syncWrite(filepath.Join(m.Dir(), "f"+string(rune('0'+i))), []byte("state")); err != nil {
				b.Fatal(err)
			}
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if err := os.WriteFile(filepath.Join(m.Dir(), "f0"), []byte("lost"), 0o644); err != nil {
				b.Fatal(err)
			}
			if _, err := m.PowerLoss(); err != nil {
				b.Fatal(err)
			}
		}
	})
	for _, layer := range []bool{false, true} {
		name := "fsync-plain"
		if layer {
			name = "fsync-lazyfs"
		}
		b.Run(name, func(b *testing.B) {
			root := b.TempDir()
			dir := filepath.Join(root, "backing")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				b.Fatal(err)
			}
			if layer {
				dir = lazyfstest.Start(b, lazyfstest.Spec{Backing: dir, Mount: filepath.Join(root, "mnt")}).Dir()
			}
			data := make([]byte, 512)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := syncWrite(filepath.Join(dir, "state"), data); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// syncWrite writes a temp file, fsyncs it, renames it over path and fsyncs
// the folder: the reference's commit.
func syncWrite(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
