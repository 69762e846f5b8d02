package harness

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/fencecheck/fencecheck/history"
	"github.com/fencecheck/fencecheck/models"
	"github.com/fencecheck/fencecheck/models/overlap"
	"github.com/fencecheck/fencecheck/reports"
)

// CheckFile checks a history file without holding its events: each line is
// parsed, paired into a compact operation (models.Op) and dropped, so memory
// grows with the number of operations, not with the file's bytes. Nemesis
// events are kept (they are few) to shade the visualizations. progress, when
// set, gets a line every second on a large file.
func CheckFile(ctx context.Context, path, dir string, sem models.Semantics, cfg Config, progress io.Writer) (reports.Check, *models.Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return reports.Check{}, nil, err
	}
	defer f.Close()
	var size int64
	if st, err := f.Stat(); err == nil {
		size = st.Size()
	}
	ttl := cfg.TTL
	if ttl == 0 {
		ttl = DefaultTTL
	}
	rd := history.NewReader(f)
	pairer := history.NewPairer()
	leases := overlap.NewFinder(overlap.Options{TTL: ttl})
	var ops []*history.Op
	var faults []history.Event
	var end int64
	leaseErr := error(nil)
	last := time.Now()
	for n := 0; ; n++ {
		e, err := rd.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return reports.Check{}, nil, err
		}
		end = max(end, e.Time)
		if e.Process == history.NemesisProcess && !e.IsTamper() && !e.IsRun() {
			faults = append(faults, e)
		}
		op, err := pairer.Add(e)
		if err != nil {
			return reports.Check{}, nil, &history.ParseError{Line: rd.Line(), Err: err}
		}
		if op != nil {
			ops = append(ops, op)
		}
		if leaseErr == nil {
			leaseErr = leases.Add(e)
		}
		if progress != nil && n%65536 == 0 && time.Since(last) > time.Second {
			last = time.Now()
			pct := 0.0
			if size > 0 {
				pct = 100 * float64(rd.BytesRead) / float64(size)
			}
			fmt.Fprintf(progress, "check: read %d lines (%.0f%%), %d operations\n", rd.Line(), pct, len(ops))
		}
		if ctx.Err() != nil {
			return reports.Check{}, nil, ctx.Err()
		}
	}
	ops = append(ops, pairer.Finish()...)
	if rd.Truncated && progress != nil {
		fmt.Fprintf(progress, "check: the last line (%d) was cut short, as by a crash while it was written; checked everything before it\n", rd.Line())
	}
	if progress != nil && size > 64<<20 {
		fmt.Fprintf(progress, "check: read %d lines, %d operations; checking\n", rd.Line(), len(ops))
	}
	rep, err := models.CheckOps(ctx, ops, checkOptions(sem, cfg))
	if err != nil {
		return reports.Check{}, nil, fmt.Errorf("check: %w", err)
	}
	rep.AnnotateFaults(faults, end)
	rep.NameCauses()
	var ov *overlap.Report
	if leaseErr == nil {
		r := leases.Report()
		ov = &r
	}
	return assemble(rep, ov, dir), rep, nil
}

func checkOptions(sem models.Semantics, cfg Config) models.Options {
	return models.Options{Semantics: sem, Checker: cfg.Checker, Timeout: cfg.CheckTimeout, MinOps: cfg.MinOps}
}
