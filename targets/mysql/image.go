package mysql

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// Paths of Debian's mariadb-server package, on the host and in the image.
const (
	serverBinary = "/usr/sbin/mariadbd"
	shareDir     = "/usr/share/mysql"
	// BootstrapSQL initialises an empty data folder: `mariadbd --bootstrap`
	// reads it on stdin.
	BootstrapSQL = "/usr/share/fencecheck/bootstrap.sql"
	// ImageName is the name `fencecheck images` knows the image by.
	ImageName = "mariadb"
)

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// bootstrapFiles are the system tables mariadb-install-db feeds to
// `mariadbd --bootstrap`, without the help tables, the GIS procedures and
// the sys schema, which nothing here uses.
var bootstrapFiles = []string{"mysql_system_tables.sql", "mysql_performance_tables.sql", "mysql_system_tables_data.sql"}

// bootstrap is the data folder's initialisation, in mariadb-install-db's
// order, plus the account the adapters use: bootstrap mode runs without the
// grant tables, so the account is a row in mysql.global_priv (all
// privileges, no password: the network is the run's own).
func bootstrap() ([]byte, error) {
	var b bytes.Buffer
	b.WriteString("create database if not exists mysql;\nuse mysql;\nSET @auth_root_socket=NULL;\n")
	for _, f := range bootstrapFiles {
		data, err := os.ReadFile(shareDir + "/" + f)
		if err != nil {
			return nil, err
		}
		b.Write(data)
		b.WriteString("\n")
	}
	fmt.Fprintf(&b, "CREATE DATABASE IF NOT EXISTS %s;\n", Database)
	fmt.Fprintf(&b, "INSERT INTO mysql.global_priv (Host, User, Priv) VALUES ('%%', '%s', '{\"access\":18446744073709551615}');\n", User)
	return b.Bytes(), nil
}

// ImageSpec assembles the MariaDB image from this machine's Debian
// mariadb-server (installing it when missing): mariadbd and every library
// it loads, the English messages and the character sets, the bootstrap SQL,
// a shell, and the clock-skew library. The data folder is initialised
// without mariadb-install-db (a shell script that needs a dozen tools):
// the container's command runs `mariadbd --bootstrap` with the SQL that
// script would feed it, through Debian's dash, which needs only the libc
// that mariadbd brings anyway (a static busybox would add a package for
// one redirection).
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if err := docker.RequireDebianPackage(ctx, progress, serverBinary, "mariadb-server", "mariadb"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	fs.Dir("/data", 0o755)
	fs.Dir("/fencecheck/clock", 0o755)
	if err := fs.Binary(ctx, serverBinary, serverBinary); err != nil {
		return docker.ImageSpec{}, err
	}
	if err := fs.Binary(ctx, "/usr/bin/dash", "/bin/sh"); err != nil {
		return docker.ImageSpec{}, err
	}
	for _, d := range []string{"english", "charsets"} {
		if err := fs.Tree(ctx, shareDir+"/"+d, shareDir+"/"+d, nil); err != nil {
			return docker.ImageSpec{}, err
		}
	}
	boot, err := bootstrap()
	if err != nil {
		return docker.ImageSpec{}, err
	}
	fs.File(BootstrapSQL, 0o644, boot)
	fs.File("/etc/nsswitch.conf", 0o644, []byte("passwd: files\ngroup: files\n"))

	if err := fs.AddSkewLibrary(ctx); err != nil {
		return docker.ImageSpec{}, err
	}
	return fs.Image(ImageName), nil
}
