package servers

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
)

// Templates: initialising a data directory takes seconds (initdb,
// mariadb-install-db); it is done once per test binary and copied for each
// server.
var (
	tmplMu   sync.Mutex
	tmplRoot string
	tmplDirs = map[string]string{}
	tmplErrs = map[string]error{}
)

// template returns the data directory of kind, made by mk in an empty
// directory the first time (and its error every time after a failure).
func template(kind string, mk func(dir string) error) (string, error) {
	tmplMu.Lock()
	defer tmplMu.Unlock()
	if d, ok := tmplDirs[kind]; ok {
		return d, tmplErrs[kind]
	}
	if tmplRoot == "" {
		root, err := os.MkdirTemp("", "outbox-faults-templates-")
		if err != nil {
			return "", err
		}
		if err := os.Chmod(root, 0o755); err != nil {
			return "", err
		}
		tmplRoot = root
	}
	dir := filepath.Join(tmplRoot, kind)
	err := mk(dir)
	tmplDirs[kind], tmplErrs[kind] = dir, err
	return dir, err
}

// RemoveTemplates deletes the data directory templates; call it from
// TestMain after m.Run.
func RemoveTemplates() {
	tmplMu.Lock()
	defer tmplMu.Unlock()
	if tmplRoot != "" {
		_ = os.RemoveAll(tmplRoot)
		tmplRoot = ""
		tmplDirs = map[string]string{}
		tmplErrs = map[string]error{}
	}
}

// serverDir makes a temporary directory that other users can traverse
// (PostgreSQL runs as postgres), removed when t ends.
func serverDir(t testing.TB, prefix string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "outbox-faults-"+prefix+"-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// copyDir copies src to dst, keeping owners and modes.
func copyDir(src, dst string) error {
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		return fmt.Errorf("cp -a %s %s: %v: %s", src, dst, err, out)
	}
	return nil
}

// osUser returns the credentials of an OS user.
func osUser(name string) (*syscall.Credential, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return nil, err
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), NoSetGroups: true}, nil
}

// chown hands dir (recursively) to cred's user.
func chown(dir string, cred *syscall.Credential) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, int(cred.Uid), int(cred.Gid))
	})
}

// Options of the servers.
type Options struct {
	env  []string
	args []string
}

// Option configures a server.
type Option func(*Options)

// WithEnv adds KEY=VALUE variables to the server's environment (such as
// LD_PRELOAD and FAKETIME for libfaketime).
func WithEnv(kv ...string) Option { return func(o *Options) { o.env = append(o.env, kv...) } }

// WithArgs adds arguments to the server's command line.
func WithArgs(args ...string) Option { return func(o *Options) { o.args = append(o.args, args...) } }

func options(opts []Option) Options {
	var o Options
	for _, f := range opts {
		f(&o)
	}
	return o
}
