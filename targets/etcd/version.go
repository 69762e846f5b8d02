package etcd

import (
	"context"
	"fmt"
	"regexp"
	"strconv"

	"github.com/fencecheck/fencecheck/harness"
	"github.com/fencecheck/fencecheck/harness/docker"
)

// DefaultVersion is the release the nested module images/etcd pins (its
// go.mod; a test keeps the two equal): the image a run without --version
// uses.
const DefaultVersion = "v3.7.3"

// Pinned are the releases a minor version names (--version 3.5): the newest
// of each the module proxy served when they were chosen, fixed so that a
// reproduce line names one server whatever the proxy adds later.
var Pinned = map[string]string{"3.5": "v3.5.36", "3.6": "v3.6.17", "3.7": DefaultVersion}

var releaseRE = regexp.MustCompile(`^v?3\.(\d+)\.(\d+)(-[0-9A-Za-z.]+)?$`)

// Release resolves a --version: "" is DefaultVersion, a minor version its
// pinned release, and v3.x.y (or 3.x.y) itself from 3.5 on, the first
// release under the module path go.etcd.io/etcd/server/v3 that the image
// is built from.
func Release(version string) (string, error) {
	if version == "" {
		return DefaultVersion, nil
	}
	if r, ok := Pinned[version]; ok {
		return r, nil
	}
	m := releaseRE.FindStringSubmatch(version)
	if m == nil {
		return "", fmt.Errorf("--version %q: want a minor version (3.5, 3.6, 3.7) or a release v3.x.y the Go module proxy serves", version)
	}
	if minor, _ := strconv.Atoi(m[1]); minor < 5 {
		return "", fmt.Errorf("--version %q: etcd before 3.5 has no module go.etcd.io/etcd/server/v3 to build from", version)
	}
	if version[0] != 'v' {
		version = "v" + version
	}
	return version, nil
}

// Open is New with the version checked: the targets table's way in.
func Open(opts Options) (harness.Target, error) {
	if _, err := Release(opts.Version); err != nil {
		return nil, err
	}
	return New(opts), nil
}

// image is the members' image at the target's release.
func (t *Target) image() string {
	if t.release == DefaultVersion {
		return docker.ImageEtcd
	}
	return docker.EtcdImage(t.release)
}

// System names the release and the cluster's size.
func (t *Target) System(context.Context) (string, error) {
	s := "etcd " + t.release + ", " + strconv.Itoa(len(t.members)) + " member"
	if len(t.members) != 1 {
		s += "s"
	}
	if t.resource != nil && t.resource.System != "" {
		s += "; " + t.resource.System
	}
	return s, nil
}
