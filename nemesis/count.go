package nemesis

import (
	"encoding/json"

	"github.com/fencecheck/fencecheck/history"
)

// Count is how often a nemesis acted, read from its fault events
// (history/fault.go): the one count of faults. The scheduler counts the
// events it records (a run's counts, for the gate's "every requested fault
// took effect" and the tests); the analysis counts a history's events the
// same way and renders them (results.json's nemeses), so the two agree.
type Count struct {
	// Started counts faults that took effect (start events).
	Started int `json:"started"`
	// Failed counts faults that were tried and did not apply (error
	// events), Error the last one's error.
	Failed int    `json:"failed"`
	Error  string `json:"last_error,omitempty"`
	// Waited counts tries that found every node held by another fault (the
	// scheduler's own: the history has it in the run's end event).
	Waited int `json:"waited_for_a_node,omitempty"`
	// Modes counts starts and failures by fault mode (extra.mode; "" for
	// faults without one).
	Modes map[string]*ModeCount `json:"modes,omitempty"`
	// EndFailed counts faults that could not be undone, even by the final
	// heal (stop events with an error), EndError the last one's error;
	// EndRetried those that could not be undone when due and were left for
	// the final heal (stop-failed events).
	EndFailed  int    `json:"failed_to_end,omitempty"`
	EndError   string `json:"last_end_error,omitempty"`
	EndRetried int    `json:"retried_at_heal,omitempty"`
}

// ModeCount is how often one mode of a nemesis applied and failed to.
type ModeCount struct {
	Started int    `json:"started"`
	Failed  int    `json:"failed"`
	Error   string `json:"last_error,omitempty"`
}

func (c *Count) mode(m string) *ModeCount {
	if c.Modes == nil {
		c.Modes = map[string]*ModeCount{}
	}
	mc := c.Modes[m]
	if mc == nil {
		mc = &ModeCount{}
		c.Modes[m] = mc
	}
	return mc
}

// Add counts one event of the nemesis (its f), and reports whether it
// counted anything: a start, an error, a stop that carries an error, a
// stop-failed. Other events (a stop, a marker) count nothing.
func (c *Count) Add(e history.Event) bool {
	str := func(k string) string {
		var s string
		_ = json.Unmarshal(e.Extra[k], &s)
		return s
	}
	switch str(history.ExtraAction) {
	case history.FaultStart:
		c.Started++
		c.mode(str(history.ExtraMode)).Started++
	case history.FaultError:
		msg := str(history.ExtraError)
		c.Failed++
		c.Error = msg
		mc := c.mode(str(history.ExtraMode))
		mc.Failed++
		mc.Error = msg
	case history.FaultStopFailed:
		c.EndRetried++
	case history.FaultStop:
		msg := str(history.ExtraError)
		if msg == "" {
			return false
		}
		c.EndFailed++
		c.EndError = msg
	default:
		return false
	}
	return true
}
