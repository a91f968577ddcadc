// Package capfilter cuts the capabilities an OCI process asks for down to a bounding set, in the
// files runc reads them from. The JSON is edited generically, not through the runtime-spec
// types, so that fields newer than those types survive untouched.
package capfilter

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// names maps the capabilities of the Linux ABI to their numbers; a capability this table does
// not know is left in place (runc ignores those the kernel does not know).
var names = map[string]uint{
	"CAP_CHOWN": unix.CAP_CHOWN, "CAP_DAC_OVERRIDE": unix.CAP_DAC_OVERRIDE,
	"CAP_DAC_READ_SEARCH": unix.CAP_DAC_READ_SEARCH, "CAP_FOWNER": unix.CAP_FOWNER,
	"CAP_FSETID": unix.CAP_FSETID, "CAP_KILL": unix.CAP_KILL, "CAP_SETGID": unix.CAP_SETGID,
	"CAP_SETUID": unix.CAP_SETUID, "CAP_SETPCAP": unix.CAP_SETPCAP,
	"CAP_LINUX_IMMUTABLE": unix.CAP_LINUX_IMMUTABLE, "CAP_NET_BIND_SERVICE": unix.CAP_NET_BIND_SERVICE,
	"CAP_NET_BROADCAST": unix.CAP_NET_BROADCAST, "CAP_NET_ADMIN": unix.CAP_NET_ADMIN,
	"CAP_NET_RAW": unix.CAP_NET_RAW, "CAP_IPC_LOCK": unix.CAP_IPC_LOCK, "CAP_IPC_OWNER": unix.CAP_IPC_OWNER,
	"CAP_SYS_MODULE": unix.CAP_SYS_MODULE, "CAP_SYS_RAWIO": unix.CAP_SYS_RAWIO,
	"CAP_SYS_CHROOT": unix.CAP_SYS_CHROOT, "CAP_SYS_PTRACE": unix.CAP_SYS_PTRACE,
	"CAP_SYS_PACCT": unix.CAP_SYS_PACCT, "CAP_SYS_ADMIN": unix.CAP_SYS_ADMIN, "CAP_SYS_BOOT": unix.CAP_SYS_BOOT,
	"CAP_SYS_NICE": unix.CAP_SYS_NICE, "CAP_SYS_RESOURCE": unix.CAP_SYS_RESOURCE,
	"CAP_SYS_TIME": unix.CAP_SYS_TIME, "CAP_SYS_TTY_CONFIG": unix.CAP_SYS_TTY_CONFIG,
	"CAP_MKNOD": unix.CAP_MKNOD, "CAP_LEASE": unix.CAP_LEASE, "CAP_AUDIT_WRITE": unix.CAP_AUDIT_WRITE,
	"CAP_AUDIT_CONTROL": unix.CAP_AUDIT_CONTROL, "CAP_SETFCAP": unix.CAP_SETFCAP,
	"CAP_MAC_OVERRIDE": unix.CAP_MAC_OVERRIDE, "CAP_MAC_ADMIN": unix.CAP_MAC_ADMIN,
	"CAP_SYSLOG": unix.CAP_SYSLOG, "CAP_WAKE_ALARM": unix.CAP_WAKE_ALARM,
	"CAP_BLOCK_SUSPEND": unix.CAP_BLOCK_SUSPEND, "CAP_AUDIT_READ": unix.CAP_AUDIT_READ,
	"CAP_PERFMON": unix.CAP_PERFMON, "CAP_BPF": unix.CAP_BPF, "CAP_CHECKPOINT_RESTORE": unix.CAP_CHECKPOINT_RESTORE,
}

// Set is a capability bounding set, as /proc/<pid>/status shows it (CapBnd).
type Set uint64

// Has reports whether the capability with the given number is in the set.
func (s Set) Has(c uint) bool { return c < 64 && s&(1<<c) != 0 }

// Missing names the known capabilities that are not in the set, sorted by number; empty on a
// machine with the full set, where nothing needs filtering.
func (s Set) Missing() []string {
	var out []string
	for c := uint(0); c <= unix.CAP_LAST_CAP; c++ {
		if s.Has(c) {
			continue
		}
		for n, v := range names {
			if v == c {
				out = append(out, n)
			}
		}
	}
	return out
}

// Bounding reads this process's bounding set.
func Bounding() (Set, error) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "CapBnd:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return 0, fmt.Errorf("CapBnd %q: %w", v, err)
			}
			return Set(n), nil
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, errors.New("no CapBnd line in /proc/self/status")
}

// Filter removes from the process object's capability lists (bounding, effective, inheritable,
// permitted, ambient) every known capability not in set. It reports whether it changed anything.
func Filter(process map[string]any, set Set) bool {
	caps, _ := process["capabilities"].(map[string]any)
	changed := false
	for kind, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := list[:0:0]
		for _, c := range list {
			name, _ := c.(string)
			if n, known := names[name]; known && !set.Has(n) {
				changed = true
				continue
			}
			kept = append(kept, c)
		}
		caps[kind] = kept
	}
	return changed
}

// Rewrite applies Filter, with this process's bounding set, to the file runc's command line
// names: the bundle's config.json for create and run (--bundle, default the working directory)
// and the --process file for exec. Other commands, and exec without --process, are left alone.
func Rewrite(args []string) error {
	set, err := Bounding()
	if err != nil {
		return err
	}
	cmd, rest := subcommand(args)
	var path string
	var isConfig bool
	switch cmd {
	case "create", "run":
		bundle := flagValue(rest, "bundle", "b")
		if bundle == "" {
			bundle = "."
		}
		path, isConfig = filepath.Join(bundle, "config.json"), true
	case "exec":
		path = flagValue(rest, "process", "p")
	}
	if path == "" {
		return nil
	}
	return rewriteFile(path, isConfig, set)
}

func rewriteFile(path string, isConfig bool, set Set) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	process := doc
	if isConfig {
		process, _ = doc["process"].(map[string]any)
		if process == nil {
			return nil
		}
	}
	if !Filter(process, set) {
		return nil
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	tmp := path + ".runcwrap"
	if err := os.WriteFile(tmp, out, st.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// globalWithValue are runc's global flags that take a separate value.
var globalWithValue = map[string]bool{"--root": true, "--log": true, "--log-format": true, "--criu": true, "--rootless": true}

// subcommand finds runc's command among its global flags.
func subcommand(args []string) (string, []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return a, args[i+1:]
		}
		if globalWithValue[a] {
			i++
		}
	}
	return "", nil
}

// flagValue is the value of --long or -short in args, in either the "--f v" or "--f=v" form.
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		for _, f := range []string{"--" + long, "-" + long, "-" + short} {
			if a == f && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, f+"="); ok {
				return v
			}
		}
	}
	return ""
}

// FindRunc is the first runc on $PATH that is not this program.
func FindRunc() (string, error) {
	self, _ := os.Executable()
	self, _ = filepath.EvalSymlinks(self)
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		p := filepath.Join(dir, "runc")
		if r, err := filepath.EvalSymlinks(p); err == nil && r != self {
			if _, err := exec.LookPath(p); err == nil {
				return p, nil
			}
		}
	}
	return "", errors.New("no runc on $PATH (set RUNCWRAP_RUNC or pass --runc=PATH)")
}
