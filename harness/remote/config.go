package remote

import (
	"bufio"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// sshConfig is what ~/.ssh/config says of one host: the keywords a control
// machine's user relies on to reach it (HostName, User, Port,
// IdentityFile, UserKnownHostsFile). As OpenSSH reads it, the first value
// given for a keyword wins, over every Host block that matches.
type sshConfig struct {
	HostName, User, Port string
	IdentityFiles        []string
	KnownHosts           []string
}

// readSSHConfig reads the blocks of file that match alias ("" when the file
// is missing: no config is no error).
func readSSHConfig(file, alias string) (sshConfig, error) {
	var c sshConfig
	f, err := os.Open(file)
	if os.IsNotExist(err) {
		return c, nil
	}
	if err != nil {
		return c, err
	}
	defer f.Close()
	matching := true // keywords before the first Host block apply to all
	in := bufio.NewScanner(f)
	for in.Scan() {
		line := strings.TrimSpace(in.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// "Keyword value", "Keyword=value", "Keyword\tvalue".
		i := strings.IndexAny(line, " \t=")
		if i < 0 {
			continue
		}
		key, val := line[:i], line[i:]
		key = strings.ToLower(strings.TrimSpace(key))
		val = strings.Trim(strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(val), "=")), `"`)
		switch key {
		case "host":
			matching = hostMatches(strings.Fields(val), alias)
			continue
		case "match":
			matching = false // Match blocks are not read: their conditions need a shell
			continue
		}
		if !matching {
			continue
		}
		switch key {
		case "hostname":
			if c.HostName == "" {
				c.HostName = val
			}
		case "user":
			if c.User == "" {
				c.User = val
			}
		case "port":
			if c.Port == "" {
				c.Port = val
			}
		case "identityfile":
			c.IdentityFiles = append(c.IdentityFiles, expandHome(val))
		case "userknownhostsfile":
			if c.KnownHosts == nil {
				for _, k := range strings.Fields(val) {
					c.KnownHosts = append(c.KnownHosts, expandHome(k))
				}
			}
		}
	}
	return c, in.Err()
}

// hostMatches is OpenSSH's Host pattern list: globs, "!" negates.
func hostMatches(patterns []string, alias string) bool {
	matched := false
	for _, p := range patterns {
		neg := strings.HasPrefix(p, "!")
		ok, _ := path.Match(strings.TrimPrefix(p, "!"), alias)
		if ok && neg {
			return false
		}
		matched = matched || ok
	}
	return matched
}

func expandHome(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if h, err := os.UserHomeDir(); err == nil {
			return filepath.Join(h, strings.TrimPrefix(p, "~"))
		}
	}
	return p
}
