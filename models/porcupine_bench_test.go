package models

import (
	"context"
	"testing"
	"time"

	"github.com/fencecheck/fencecheck/models/historytest"
)

// Workload-like histories: acquire → write → maybe read → release, 5 writer
// clients and 1 reader per key, 8 keys, 2% timeouts.
func benchmarkCheckPorcupine(b *testing.B, ops int) {
	events := historytest.Generate(historytest.GenConfig{Ops: ops, Keys: 8, ClientsPerKey: 5, InfoRate: 0.02, Seed: 1})
	b.ReportAllocs()
	var porc time.Duration
	for b.Loop() {
		rep, err := Check(context.Background(), events, Options{Checker: CheckerPorcupine, Timeout: 10 * time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if rep.Verdict != Valid {
			b.Fatalf("%s: %s", rep.Verdict, rep.Reason)
		}
		porc += resultOf(rep, CheckerPorcupine, ModelRegister).Duration
	}
	b.ReportMetric(float64(porc.Nanoseconds())/float64(b.N)/1e6, "porcupine-ms/op")
	b.ReportMetric(float64(ops), "history-ops")
}

func BenchmarkCheckPorcupine10k(b *testing.B)  { benchmarkCheckPorcupine(b, 10_000) }
func BenchmarkCheckPorcupine100k(b *testing.B) { benchmarkCheckPorcupine(b, 100_000) }
