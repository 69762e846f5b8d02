package shrink

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/durable"
	"github.com/fencecheck/fencecheck/gate"
	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/nemesis"
	"github.com/fencecheck/fencecheck/reports"
)

// Running a candidate: its tries, two at a time, until the answer is
// decided either way.

// candidate makes a candidate of faults in main phase t.
func (s *shrinker) candidate(what string, faults []nemesis.Scheduled, t time.Duration) *Candidate {
	return &Candidate{What: what, Faults: len(faults), MainPhase: t, faults: append([]nemesis.Scheduled(nil), faults...)}
}

// test runs c until its answer is decided and keeps it as the best when it
// still fails. Only a candidate that cannot be run at all is an error.
func (s *shrinker) test(c *Candidate) error {
	if s.ctx.Err() != nil {
		return nil
	}
	c.N = len(s.res.Candidates) + 1
	c.Schedule = filepath.Join(s.dir, "candidates", fmt.Sprintf("%03d.json", c.N))
	sched := &nemesis.Schedule{Seed: s.base.Seed, Nemesis: s.orig.Nemesis, MainPhase: c.MainPhase, Faults: c.faults}
	b, err := sched.Marshal()
	if err == nil {
		err = durable.WriteFile(c.Schedule, b, 0o644)
	}
	if err != nil {
		return err
	}
	s.tries(c, true)
	s.res.Candidates = append(s.res.Candidates, *c)
	var outcome []string
	for _, t := range c.Tries {
		switch {
		case t.CutShort:
			outcome = append(outcome, "cut short")
		case t.Verdict != "":
			outcome = append(outcome, t.Verdict)
		default:
			outcome = append(outcome, "could not run")
		}
	}
	verdict := "passes"
	if c.StillFails {
		verdict = "still fails"
		s.best = c
	}
	if s.ctx.Err() != nil && !c.StillFails {
		verdict = "undecided (out of budget)"
	}
	kept := "none kept yet"
	if s.best != nil {
		kept = fmt.Sprintf("kept: %s, %s", nFaults(len(s.best.faults)), seconds(s.best.MainPhase))
	}
	s.progressf("candidate %d [%s] %s, %s: %s → %s · %s · %s used", c.N, c.What, faultCount(c.faults),
		seconds(c.MainPhase), strings.Join(outcome, ", "), verdict, kept, time.Since(s.began).Round(time.Second))
	for _, t := range c.Tries {
		if t.usage {
			return usagef("a candidate could not be run: %s", t.Error)
		}
	}
	return nil
}

// tries runs c's tries. With early, it stops once the answer is decided
// (Need invalid, or too few left to reach Need), and runs no more at once
// than could still be needed; otherwise it runs every try c lacks.
func (s *shrinker) tries(c *Candidate, early bool) {
	cfg := s.base
	cfg.Schedule, cfg.Time = c.Schedule, c.MainPhase
	cfg.Store = filepath.Join(s.dir, "store")
	cfg.JUnit, cfg.Log, cfg.Progress = "", nil, nil
	var mu sync.Mutex
	var wg sync.WaitGroup
	done := make(chan struct{}, s.opts.Tries)
	inflight := 0
	for {
		mu.Lock()
		counted := len(s.counted(c))
		fails := c.Failed
		needFails := s.opts.Need - fails
		needPasses := s.opts.Tries - s.opts.Need + 1 - (counted - fails)
		decided := needFails <= 0 || needPasses <= 0
		want := s.opts.Tries - counted - inflight
		if early {
			if decided {
				want = 0
			}
			want = min(want, min(needFails, needPasses)-inflight)
		}
		want = min(want, s.opts.Parallel-inflight)
		for ; want > 0 && s.ctx.Err() == nil; want-- {
			inflight++
			wg.Add(1)
			go func() {
				defer wg.Done()
				t := s.run(s.ctx, cfg)
				if s.ctx.Err() != nil {
					t.CutShort = true
				}
				mu.Lock()
				c.Tries = append(c.Tries, t)
				if t.failed() {
					c.Failed++
				}
				if t.Verdict != "" {
					s.ran++
				}
				s.res.Runs++
				mu.Unlock()
				done <- struct{}{}
			}()
		}
		mu.Unlock()
		if inflight == 0 {
			break
		}
		<-done
		inflight--
	}
	wg.Wait()
	c.StillFails = c.Failed >= s.opts.Need
}

// counted are c's tries that count (not cut short by the budget).
func (s *shrinker) counted(c *Candidate) []Try {
	var out []Try
	for _, t := range c.Tries {
		if !t.CutShort {
			out = append(out, t)
		}
	}
	return out
}

func (s *shrinker) lastError() string {
	for i := len(s.res.Candidates) - 1; i >= 0; i-- {
		for _, t := range s.res.Candidates[i].Tries {
			if t.Error != "" {
				return t.Error
			}
		}
	}
	return "no error recorded"
}

// lastShown is the latest time to detection among c's invalid tries.
func (c *Candidate) lastShown() time.Duration {
	var out time.Duration
	for _, t := range c.Tries {
		if t.failed() {
			out = max(out, t.FirstInvalidAt)
		}
	}
	return out
}

// runTry is one try: gate.Run on cfg, and the time to detection from the
// run's results.json.
func runTry(ctx context.Context, cfg harness.Config) Try {
	res, err := gate.Run(ctx, cfg)
	t := Try{Dir: res.Dir, ExitCode: res.ExitCode, Verdict: string(res.Verdict), FirstInvalidAt: -1}
	if err != nil {
		t.Error, t.usage = err.Error(), gate.IsUsage(err)
	}
	if t.Dir != "" {
		var r struct {
			FirstInvalidAt *int64 `json:"first_invalid_at_ns"`
		}
		if b, err := os.ReadFile(filepath.Join(t.Dir, reports.ResultsFile)); err == nil && json.Unmarshal(b, &r) == nil && r.FirstInvalidAt != nil {
			t.FirstInvalidAt = time.Duration(*r.FirstInvalidAt)
		}
	}
	return t
}
