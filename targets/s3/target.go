package s3

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	// S3Port is the gateway's port, the filer node's port "s3".
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
		{Name: MasterNode, Role: "seaweedfs-master, resource state", Ports: []nodes.Port{{Number: masterPort}, grpc(masterPort)},
			Data: data, Clock: clock, Health: health("/cluster/status", false),
			// One master: no raft quorum to wait for (-peers=none). No
			// usage reports leave the run (-telemetry=false).
			Container: weed("master", "-port="+strconv.Itoa(masterPort), "-mdir={data}", "-peers=none",
				"-volumeSizeLimitMB=64", "-defaultReplication=000", "-telemetry=false")},
		{Name: VolumeNode, Role: "seaweedfs-volume, resource state", Ports: []nodes.Port{{Number: volumePort}, grpc(volumePort)},
			Data: nodes.Data{Path: "/data", NoLayer: volumeNoLayer}, Clock: clock, Health: health("/status", true), WaitFor: []string{MasterNode},
			Container: weed("volume", "-port="+strconv.Itoa(volumePort), "-dir={data}", "-max=0",
				"-master="+master, "-preStopSeconds=0")},
		{Name: FilerNode, Role: "seaweedfs-filer, resource state", Ports: []nodes.Port{{Number: filerPort}, {Name: "s3", Number: S3Port}, grpc(filerPort)},
			Data: data, Clock: clock, WaitFor: []string{MasterNode},
			Health: nodes.Health{Probe: nodes.Probe{Func: filerDurable}, Timeout: 90 * time.Second, Quorum: true},
			Container: weed("filer", "-port="+strconv.Itoa(filerPort), "-master="+master, "-defaultStoreDir={data}",
				"-s3", "-s3.port="+strconv.Itoa(S3Port))},
	}
	return etcd.New(etcd.Options{Members: o.Members, Log: o.Log, Resource: &etcd.Resource{
		Name: o.Name(), Backend: "s3", Nodes: seaweed,
		Args: []string{"--s3-endpoint", "http://{addr:" + FilerNode + ":s3}", "--s3-write", string(o.Mode)},
		// The adapters create the bucket: only once the filer syncs what
		// is written under /buckets/.
		AdapterWaitFor: []string{FilerNode},
		System:         "SeaweedFS " + Version + " (master, volume server, filer with its S3 gateway; " + string(o.Mode) + " writes)",
	}})
}

// volumeNoLayer says why the volume server's data stays off the power-loss
// layer. Measured here (docs/s3.md): SeaweedFS creates a volume's files as
// the master grows the collection and syncs their contents on each write
// (with the fsync rule) but not the folder that names them, so a power loss
// drops whole volumes (lazyfs: 14 and 24 files lost), and every object whose
// chunks were in them answers "volume N not found" from then on: the run's
// final reads get no answer, and the verdict is unknown. Until SeaweedFS
// syncs the folder, the layer would show only that.
const volumeNoLayer = "SeaweedFS does not sync the folder of a volume's new files: a power loss drops whole volumes (docs/s3.md)"

// filerConf is SeaweedFS's per-path storage configuration: every entry
// under /buckets/ (the S3 buckets, their objects' metadata) is written to
// the filer's store with a sync, and every chunk of their data is written
// to the volume server with fsync=true, before the PUT is answered.
// SeaweedFS's default is neither: an acknowledged object can vanish at a
// power loss. The target runs it the way a user who needs acknowledged
// writes to last must configure it, as the postgres target runs with
// fsync on.
const filerConf = `{"version":2,"locations":[{"locationPrefix":"/buckets/","fsync":true}]}`

// filerDurable is the filer's health: it answers, and its configuration
// holds filerConf, written (itself with fsync) the first time and after a
// wipe. The configuration lives in the filer's own namespace
// (/etc/seaweedfs/filer.conf), which the filer watches and reloads.
func filerDurable(ctx context.Context, addr string) error {
	u := "http://" + addr + "/etc/seaweedfs/filer.conf"
	client := &http.Client{Timeout: 2 * time.Second}
	get := func() (int, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return 0, "", err
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), err
	}
	code, body, err := get()
	if err != nil {
		return err
	}
	if code == http.StatusOK && body == filerConf {
		return nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, u+"?fsync=true", strings.NewReader(filerConf))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return fmt.Errorf("the filer's configuration was %d %.80q: wrote the fsync rule (%s), to be read back", code, body, resp.Status)
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
