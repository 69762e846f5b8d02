package sshlab

import (
	"context"
	"io"

	"github.com/fencecheck/fencecheck/harness/docker"
)

// ImageName is the name `fencecheck images` knows the lab's host image by.
const ImageName = "sshhost"

func init() { docker.RegisterRootfs(ImageName, ImageSpec) }

// Paths on this machine (Debian's packages) and inside the image.
const (
	hostSSHD = "/usr/sbin/sshd" // package openssh-server
	hostDash = "/usr/bin/dash"  // package dash (essential)
	// SSHD is the server inside the image, at the path Debian built it for:
	// sshd 9.2 re-executes itself (argv[0] must be absolute) for every
	// connection.
	SSHD = "/usr/sbin/sshd"
	// ConfigFile is the server's configuration inside the image.
	ConfigFile = "/etc/ssh/sshd_config"
	// KeysDir is where each host's own folder (its host key and the
	// authorized keys) is bind-mounted read-only.
	KeysDir = "/etc/ssh/lab"
	// hostKeyName and authorizedDir are inside KeysDir.
	hostKeyName   = "ssh_host_ed25519_key"
	authorizedDir = "authorized_keys"
)

// sshdConfig is the server's whole configuration. Why each line:
//
//   - UsePAM no: the image carries no PAM modules or configuration; without
//     PAM sshd checks the account itself (passwd, shell, not locked).
//   - PermitRootLogin prohibit-password, PasswordAuthentication no,
//     KbdInteractiveAuthentication no: keys only, as on a real lab host.
//   - HostKey and AuthorizedKeysFile in KeysDir: generated per lab on this
//     machine (Start) and bind-mounted, so the image holds no secret.
//   - StrictModes no: the bind-mounted folder belongs to whoever runs the
//     lab (root here, a developer in the docker group elsewhere); sshd
//     would refuse authorized keys not owned by root or the user.
//   - Subsystem sftp internal-sftp: sshd serves SFTP in process, so no
//     sftp-server binary (and its libraries) is needed.
//   - PidFile none: nothing reads it; sshd is the container's main process.
//   - LogLevel VERBOSE with -e: every login and key on the container's log.
//   - ClientAliveInterval 2, ClientAliveCountMax 3: a control connection
//     whose client died (a SIGKILLed harness, a partition) is noticed and
//     its sessions are torn down, so leftovers are real ones. In 16 s, not
//     6: Debian 12's sshd 9.2 sends its keepalive only once more than the
//     interval has passed, in whole seconds, so every 4 s, and gives up at
//     the fourth unanswered one (measured: TestDeadClientIsNoticed).
//   - MaxSessions 64: an ssh node may multiplex many sessions (one per
//     process) over one connection; OpenSSH's default is 10.
//   - UseDNS no, PrintMotd no, PrintLastLog no: nothing to resolve and no
//     /etc/motd or lastlog to read.
//
// TCP forwarding is left at OpenSSH's default (allowed), as on a stock
// Debian host; environment variables from the client are not accepted
// (no AcceptEnv), as on a stock host: set them in the command line.
const sshdConfig = `# fencecheck SSH lab host (harness/docker/sshlab)
Port 22
ListenAddress 0.0.0.0
HostKey ` + KeysDir + `/` + hostKeyName + `
AuthorizedKeysFile ` + KeysDir + `/` + authorizedDir + `/%u
PubkeyAuthentication yes
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
PrintLastLog no
Subsystem sftp internal-sftp
PidFile none
LogLevel VERBOSE
ClientAliveInterval 2
ClientAliveCountMax 3
MaxSessions 64
`

// The accounts. root logs in with /bin/sh (sshd runs every command through
// the login shell: "sh -c COMMAND"); the password field "x" with no
// /etc/shadow is not a locked account (sshd without PAM refuses keys for
// an account whose password starts with "!", by OpenSSH's source). sshd (Debian 12's
// privilege-separation user) owns nothing: the unprivileged child chroots
// to /run/sshd and drops to it before it parses anything from the network.
const (
	passwdFile = "root:x:0:0:root:/root:/bin/sh\nsshd:x:100:65534:sshd privilege separation:/run/sshd:/usr/sbin/nologin\n"
	groupFile  = "root:x:0:\nnogroup:x:65534:\n"
)

// ImageSpec assembles the host image from this machine's Debian
// openssh-server (installed when missing; Debian would start the service,
// which is stopped again): sshd and the libraries ldd lists for it, dash
// as /bin/sh, the accounts, the configuration, and the folders sshd needs.
//
// What sshd 9.2 needs in a scratch image, found by trying:
//   - /run/sshd, owned by root and not group or world writable: the
//     privilege-separation chroot; without it sshd exits at start
//     ("Missing privilege separation directory: /run/sshd").
//   - the sshd user in /etc/passwd ("Privilege separation user sshd does
//     not exist"). No /etc/nsswitch.conf or libnss_files.so: glibc 2.36
//     has the files backend built in and uses it when the file is missing.
//   - a home folder for root: without one every session's stderr starts
//     with "Could not chdir to home directory /root".
//   - the login shell at the path /etc/passwd names ("User root not
//     allowed because shell /bin/sh does not exist").
//   - /dev/null, given by the engine.
//   - no /etc/ssh/moduli: it is read only for the diffie-hellman group
//     exchange, which x/crypto/ssh and OpenSSH clients do not pick before
//     curve25519; nor /var/empty (Debian's chroot is /run/sshd).
func ImageSpec(ctx context.Context, progress io.Writer) (docker.ImageSpec, error) {
	if err := docker.RequireDebianPackage(ctx, progress, hostSSHD, "openssh-server", "ssh"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs := docker.NewRootfs()
	if err := fs.Binary(ctx, hostSSHD, SSHD); err != nil {
		return docker.ImageSpec{}, err
	}
	if err := fs.Binary(ctx, hostDash, "/bin/sh"); err != nil {
		return docker.ImageSpec{}, err
	}
	fs.File("/etc/passwd", 0o644, []byte(passwdFile))
	fs.File("/etc/group", 0o644, []byte(groupFile))
	fs.File(ConfigFile, 0o644, []byte(sshdConfig))
	fs.Dir(KeysDir, 0o755)
	fs.Dir("/root", 0o700)
	fs.Dir("/run", 0o755)
	fs.Dir("/run/sshd", 0o755)
	return fs.Image(ImageName), nil
}
