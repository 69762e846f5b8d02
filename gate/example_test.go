package gate_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/fencecheck/fencecheck/gate"
)

// A release gate in a Go test or a small CI program: run the system the
// spec describes under every fault that applies, and let the exit code
// decide. Here the system is the Python example, run as a host process.
func ExampleRun() {
	store, _ := os.MkdirTemp("", "fencecheck-example-*")
	defer os.RemoveAll(store)

	res, err := gate.Run(context.Background(), gate.Config{
		Target: "spec:../examples/python-fence/spec.json",
		// Each nemesis first strikes 1-3 s into the run; faults that need
		// the same node (a pause, a restart) take turns, so give them time.
		Time:    8 * time.Second,
		Nemesis: "pause,restart,strip",
		Store:   store,
		MinOps:  20,
	})
	if err != nil {
		fmt.Println("could not run:", err) // res.ExitCode is 3 or 64
		return
	}
	fmt.Println("passed:", res.Passed())
	fmt.Println("verdict:", res.Verdict)
	// Output:
	// passed: true
	// verdict: valid
}

// The conformance preflight on its own, as `fencecheck conform` runs it.
func ExampleConform() {
	rep, logs, err := gate.Conform(context.Background(), gate.ConformConfig{Target: "memory", Bugs: []string{"accept-equal"}})
	// The nodes' logs are kept when the target deviates or did not start.
	defer os.RemoveAll(logs)
	if err != nil {
		fmt.Println("could not start:", err)
		return
	}
	for _, d := range rep.Deviations {
		fmt.Println(d.Check)
	}
	// Output:
	// write-equal-token
}
