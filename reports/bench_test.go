package reports

import (
	"testing"

	"github.com/fencecheck/fencecheck/analysis"
)

// BenchmarkWrite is the cost of writing a run's reports (results.json,
// junit.xml, report.html, Porcupine's pages), each file durably
// (durable.WriteFile: fsync of the file and of its folder):
//
//	go test ./reports -run '^$' -bench Write -benchtime 20x
func BenchmarkWrite(b *testing.B) {
	dir := b.TempDir()
	info, res := synthRun(b, dir, 20000, true, analysis.CheckerBoth)
	b.ResetTimer()
	for range b.N {
		if _, err := Write(dir, info, res); err != nil {
			b.Fatal(err)
		}
	}
}
