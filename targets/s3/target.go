package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/nodes"
	"github.com/fencecheck/fencecheck/targets/etcd"
)

// The SeaweedFS nodes: a master (volume placement), a volume server (the
// objects' bytes) and a filer (the namespace: which key names which chunks,
// with its ETag and metadata) whose S3 gateway the adapters write through.
// Each keeps its data in its own folder on this machine.
const (
	MasterNode = "s3-master"
	VolumeNode = "s3-volume"
	FilerNode  = "s3-filer"

	masterPort = 9333
	volumePort = 8080
	filerPort  = 8888
	// S3Port is the gateway's port, the filer node's main port.
	S3Port = 8333
	// grpcOffset: SeaweedFS reaches a server's gRPC at its HTTP port +
	// 10000 unless told otherwise.
	grpcOffset = 10000
)

// Semantics: tokens are etcd's (one revision sequence for all locks), and
// the write refuses a token equal to the object's mark.
var Semantics = etcd.Semantics

// Options configure the s3 targets.
type Options struct {
	// Mode is the adapters' write (default Conditional: the target "s3";
	// Unconditional is "s3-unconditional").
	Mode WriteMode
	// Members is the number of etcd members (default 3).
	Members int
	// Log receives setup messages (default: the run's log).
	Log io.Writer
	_   struct{}
}

// Name is the target's name for these options.
func (o Options) Name() string {
	if o.Mode == Unconditional {
		return "s3-unconditional"
	}
	return "s3"
}

// New returns the target: etcd members issue the tokens (the etcd target's
// members, with their faults and leader), SeaweedFS holds the values, and
// two fenced adapters (backend s3) serve the Fencing API over both.
func New(o Options) harness.Target {
	if o.Mode == "" {
		o.Mode = Conditional
	}
	weed := func(args ...string) *nodes.Container {
		return &nodes.Container{Build: ImageName, Cmd: append([]string{weedPath}, args...)}
	}
	grpc := func(p int) nodes.Port { return nodes.Port{Name: "grpc", Number: p + grpcOffset} }
	health := func(path string, quorum bool) nodes.Health {
		return nodes.Health{Probe: nodes.Probe{Func: httpOK(path)}, Timeout: 90 * time.Second, Quorum: quorum}
	}
	// weed reads the wall clock through the vDSO (a static Go program):
	// its processes' own clock is moved, as etcd's are.
	clock := nodes.Clock{Via: nodes.ClockProcesses}
	data := nodes.Data{Path: "/data"}
	master := "{addr:" + MasterNode + "}"
	seaweed := []nodes.Node{
		{Name: MasterNode, Role: "seaweedfs-master", Ports: []nodes.Port{{Number: masterPort}, grpc(masterPort)},
			Data: data, Clock: clock, Health: health("/cluster/status", false),
			// One master: no raft quorum to wait for (-peers=none). No
			// usage reports leave the run (-telemetry=false).
			Container: weed("master", "-port="+strconv.Itoa(masterPort), "-mdir={data}", "-peers=none",
				"-volumeSizeLimitMB=64", "-defaultReplication=000", "-telemetry=false")},
		{Name: VolumeNode, Role: "seaweedfs-volume", Ports: []nodes.Port{{Number: volumePort}, grpc(volumePort)},
			Data: data, Clock: clock, Health: health("/status", true), WaitFor: []string{MasterNode},
			Container: weed("volume", "-port="+strconv.Itoa(volumePort), "-dir={data}", "-max=0",
				"-master="+master, "-preStopSeconds=0")},
		{Name: FilerNode, Role: "seaweedfs-filer", Ports: []nodes.Port{{Number: S3Port}, {Name: "filer", Number: filerPort}, grpc(filerPort)},
			Data: data, Clock: clock, Health: health("/", true), WaitFor: []string{MasterNode},
			Container: weed("filer", "-port="+strconv.Itoa(filerPort), "-master="+master, "-defaultStoreDir={data}",
				"-s3", "-s3.port="+strconv.Itoa(S3Port))},
	}
	return etcd.New(etcd.Options{Members: o.Members, Log: o.Log, Resource: &etcd.Resource{
		Name: o.Name(), Backend: "s3", Nodes: seaweed,
		Args:   []string{"--s3-endpoint", "http://{addr:" + FilerNode + "}", "--s3-write", string(o.Mode)},
		System: "SeaweedFS " + Version + " (master, volume server, filer with its S3 gateway; " + string(o.Mode) + " writes)",
	}})
}

// httpOK probes a SeaweedFS server: GET path answers 200.
func httpOK(path string) func(ctx context.Context, addr string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	return func(ctx context.Context, addr string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET %s: %s", path, resp.Status)
		}
		return nil
	}
}
