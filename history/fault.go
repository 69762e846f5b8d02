package history

// Fault events (process NemesisProcess, f the nemesis's name) are what the
// nemeses record of each fault they inject; the analysis pairs them into
// fault periods and counts them. Every one the scheduler records carries
// extra.action:
//
//   - "start": the fault took effect; extra.id numbers it (its stop carries
//     the same id), extra.mode names its mode when the nemesis has several,
//     and the rest of extra are its details; node names the nodes it acts on.
//   - "stop": the fault was undone; extra.error says why it could not be,
//     even by the final heal. The final heal ends with one stop of f "heal"
//     and no id.
//   - "stop-failed": it could not be undone when due (extra.error) and stays
//     live for the final heal to undo.
//   - "error": a fault was chosen but did not apply (extra.error, and
//     extra.mode when it has one): no period, only a failure to count.
//
// An event without extra.action (another tool's) marks an instant.
const (
	FaultStart      = "start"
	FaultStop       = "stop"
	FaultStopFailed = "stop-failed"
	FaultError      = "error"
)

// FaultHeal is the f of the final heal's stop event.
const FaultHeal = "heal"

// Keys of fault events' extra (and ExtraAction of run events too).
const (
	ExtraAction  = "action"
	ExtraFaultID = "id"
	ExtraMode    = "mode"
	ExtraError   = "error"
)
