package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
)

// ImageSpec is an image built FROM scratch from files held in memory: the
// build context is a tar made here, so nothing is pulled and nothing on disk
// but the files named is read.
type ImageSpec struct {
	// Repository, e.g. "fencecheck/etcd"; the tag is the content hash.
	Repository string
	// Dockerfile text. It must start FROM scratch and must never carry a
	// "# syntax=" line: BuildKit would try to pull a frontend image.
	Dockerfile string
	Files      []File
}

// File is one entry of the build context. A directory has Dir set and no
// Data.
type File struct {
	Name string // slash-separated path in the context, e.g. "rootfs/tmp"
	Mode int64  // permission bits, e.g. 0o755, 0o1777
	Dir  bool
	Data []byte
}

// ContentHash identifies the image by everything that goes into it; an image
// labelled with it need not be built again.
func (s ImageSpec) ContentHash() string {
	h := sha256.New()
	fmt.Fprintf(h, "repository %s\ndockerfile %d\n%s\n", s.Repository, len(s.Dockerfile), s.Dockerfile)
	files := append([]File(nil), s.Files...)
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "file %s %o %t %x\n", f.Name, f.Mode, f.Dir, sum)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Tag is the image reference for this content: repository:<12 hex digits>.
func (s ImageSpec) Tag() string { return s.Repository + ":" + s.ContentHash()[:12] }

// contextTar is the build context: the Dockerfile plus the files.
func (s ImageSpec) contextTar() (*bytes.Buffer, error) {
	if strings.Contains(s.Dockerfile, "# syntax=") {
		return nil, fmt.Errorf("image %s: a '# syntax=' line would make the engine pull a frontend", s.Repository)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(hdr *tar.Header, data []byte) error {
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	if err := add(&tar.Header{Name: "Dockerfile", Mode: 0o644, Size: int64(len(s.Dockerfile)), Typeflag: tar.TypeReg}, []byte(s.Dockerfile)); err != nil {
		return nil, err
	}
	for _, f := range s.Files {
		hdr := &tar.Header{Name: f.Name, Mode: f.Mode, Typeflag: tar.TypeReg, Size: int64(len(f.Data))}
		if f.Dir {
			hdr = &tar.Header{Name: strings.TrimSuffix(f.Name, "/") + "/", Mode: f.Mode, Typeflag: tar.TypeDir}
		}
		if err := add(hdr, f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return &buf, nil
}

// FindImage returns the tag of an image already built with this content, or
// "" when there is none.
func FindImage(ctx context.Context, cli *client.Client, spec ImageSpec) (string, error) {
	images, err := cli.ImageList(ctx, image.ListOptions{Filters: filters.NewArgs(
		filters.Arg("label", LabelProject+"=1"),
		filters.Arg("label", LabelContent+"="+spec.ContentHash()),
	)})
	if err != nil {
		return "", wrapUnavailable(err)
	}
	want := spec.Tag()
	for _, img := range images {
		for _, t := range img.RepoTags {
			if t == want {
				return want, nil
			}
		}
	}
	return "", nil
}

// BuildImage builds spec with the engine's classic builder unless an image
// with the same content hash exists. It returns the image tag and whether a
// build happened. Build output lines go to progress (may be nil).
func BuildImage(ctx context.Context, cli *client.Client, spec ImageSpec, progress io.Writer) (tag string, built bool, err error) {
	if tag, err := FindImage(ctx, cli, spec); err != nil || tag != "" {
		return tag, false, err
	}
	buf, err := spec.contextTar()
	if err != nil {
		return "", false, err
	}
	tag = spec.Tag()
	resp, err := cli.ImageBuild(ctx, buf, build.ImageBuildOptions{
		Tags:        []string{tag},
		Remove:      true,
		ForceRemove: true,
		// The classic builder: it pulls nothing for FROM scratch, where
		// BuildKit would fetch its frontend.
		Version: build.BuilderV1,
		Labels:  map[string]string{LabelProject: "1", LabelContent: spec.ContentHash()},
	})
	if err != nil {
		return "", false, fmt.Errorf("building %s: %w", tag, wrapUnavailable(err))
	}
	defer resp.Body.Close()
	if err := readBuildStream(resp.Body, progress); err != nil {
		return "", false, fmt.Errorf("building %s: %w", tag, err)
	}
	return tag, true, nil
}

// readBuildStream follows the engine's JSON message stream, forwarding the
// text and returning the first error the build reports.
func readBuildStream(r io.Reader, progress io.Writer) error {
	dec := json.NewDecoder(r)
	for {
		var msg struct {
			Stream      string `json:"stream"`
			Error       string `json:"error"`
			ErrorDetail struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading build output: %w", err)
		}
		if msg.Error != "" {
			return fmt.Errorf("%s", msg.Error)
		}
		if progress != nil && msg.Stream != "" {
			io.WriteString(progress, msg.Stream)
		}
	}
}

// wrapUnavailable turns a connection failure into *UnavailableError.
func wrapUnavailable(err error) error {
	if err != nil && client.IsErrConnectionFailed(err) {
		return &UnavailableError{Err: err}
	}
	return err
}
