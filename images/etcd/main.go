// Command etcd is the etcd server, built as a static binary for the
// fencecheck/etcd scratch image. It lives in its own module so the project's
// main module never depends on the etcd server (and its replace directives).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
