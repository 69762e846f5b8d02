package docker

import (
	"context"
	"io"
)

// EnsureFunc builds (or finds) an image whose content is more than one Go
// binary -- the Redis image carries Debian's redis-server, its libraries and
// a C library compiled on the host -- and returns its tag.
type EnsureFunc func(ctx context.Context, progress io.Writer) (tag string, err error)

// registeredImages are images assembled by the packages that own them; they
// register from init, since this package must not import targets.
var registeredImages = map[string]EnsureFunc{}

// RegisterImage adds an image that EnsureImages and KnownImages know by
// name. It is meant for init functions.
func RegisterImage(name string, ensure EnsureFunc) { registeredImages[name] = ensure }
