package nodes

import (
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/fencecheck/fencecheck/harness/reaper"
	"github.com/fencecheck/fencecheck/nemesis/procgroup"
)

// process is one run of a command node's program: a process group of its
// own (package procgroup), named to the run's reaper.
type process = procgroup.Group

// startProcess starts argv in dir with env, output appended to logw.
// The group is named to the run's reaper (nil: none), which kills it if the
// harness dies before Stop.
func startProcess(argv []string, dir string, env []string, logw io.Writer, rp *reaper.Reaper) (*process, error) {
	return procgroup.Start(argv, dir, env, logw, func(pgid int) error {
		if err := rp.Add(pgid); err != nil {
			return fmt.Errorf("naming the program to the process reaper: %w", err)
		}
		return nil
	})
}

// stopAll asks every program to stop (SIGTERM, then SIGKILL after 3 s), all
// at once.
func (d *processes) stopAll(ms []*member) error {
	var errs []error
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, m := range ms {
		p := d.proc(m)
		if p == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := p.Terminate(3 * time.Second); err != nil {
				emu.Lock()
				errs = append(errs, fmt.Errorf("%s: %w", m.Name, err))
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
