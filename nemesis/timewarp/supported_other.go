//go:build !(linux && amd64)

package timewarp

const supported = false
