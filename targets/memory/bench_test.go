package memory

import (
	"path/filepath"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/fencing"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs"
	"github.com/fencecheck/fencecheck/nemesis/lazyfs/lazyfstest"
)

// BenchmarkReferenceDisk: what the lazyfs layer (the power-loss nemesis's
// FUSE mount) costs the reference: the same node and operation mix (an
// acquire, then a write with its token, per client and key) on a plain data
// folder and on the layer over one, side by side in one run. Each
// operation waits for its group commit (write, fsync, rename, folder
// fsync), which is where the layer adds its round trips.
//
//	go test ./targets/memory -run '^$' -bench ReferenceDisk -benchtime 3s
func BenchmarkReferenceDisk(b *testing.B) {
	for _, layer := range []bool{false, true} {
		name := "plain"
		if layer {
			name = "lazyfs"
		}
		b.Run(name, func(b *testing.B) {
			dir := b.TempDir()
			data := filepath.Join(dir, "data")
			if layer {
				if err := lazyfs.Supported(); err != nil {
					b.Fatal(err)
				}
				// Served by a child process, as a run's layers are by
				// its local agent (never by the benchmark's own process).
				data = lazyfstest.Start(b, lazyfstest.Spec{Backing: data, Mount: filepath.Join(dir, "mnt")}).Dir()
			}
			n, err := NewNode(Config{Dir: data})
			if err != nil {
				b.Fatal(err)
			}
			url, err := n.Start("")
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { n.Stop() })
			var clients atomic.Int64
			start := time.Now()
			b.SetParallelism(4) // 4 clients per CPU, as a run's writers
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				id := strconv.FormatInt(clients.Add(1), 10)
				c := fencing.NewClient(url, nil)
				for pb.Next() {
					key := "k" + id
					r := c.Acquire(bg, key, "c"+id, time.Minute)
					if r.Outcome != fencing.Ok {
						b.Errorf("acquire: %s %s", r.Error, r.Message)
						return
					}
					if w := c.Write(bg, key, r.Token, []byte("v")); w.Outcome != fencing.Ok {
						b.Errorf("write: %s %s", w.Error, w.Message)
						return
					}
				}
			})
			b.ReportMetric(float64(2*b.N)/time.Since(start).Seconds(), "ops/s")
		})
	}
}
