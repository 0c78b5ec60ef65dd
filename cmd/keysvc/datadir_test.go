package main

import (
	"os"
	"strings"
	"testing"
)

// TestDataDirMode (issue 13, partial): a data directory that others (or the
// group) may write to — where they could swap the SQLite key history, the
// default KEK or the dev token — is refused by serve and by the commands
// that open key history, naming its mode; one that others may only read
// is accepted with a warning; 0700 silently.
func TestDataDirMode(t *testing.T) {
	e := newLifecycleEnv(t, "")
	for _, c := range []struct {
		mode   os.FileMode
		refuse bool
	}{{0o777, true}, {0o1777, true}, {0o770, true}, {0o702, true}, {0o750, false}, {0o700, false}} {
		if err := os.Chmod(e.dir, c.mode); err != nil {
			t.Fatal(err)
		}
		_, errOut, code := runCLI(t, nil, "tokens", "list", "--data-dir", e.dir)
		if c.refuse {
			if code != 1 || !strings.Contains(errOut, "data directory") || !strings.Contains(errOut, "chmod 700") {
				t.Errorf("tokens list with a %04o data directory: exit %d %s", c.mode, code, errOut)
			}
			_, errOut, code = runCLI(t, nil, "serve", "--listen", "127.0.0.1:0", "--data-dir", e.dir, "--kek-file", e.kek)
			if code != 1 || !strings.Contains(errOut, "data directory") {
				t.Errorf("serve with a %04o data directory: exit %d %s", c.mode, code, errOut)
			}
			continue
		}
		if code != 0 {
			t.Errorf("tokens list with a %04o data directory: exit %d %s", c.mode, code, errOut)
		}
		srv := startServer(t, nil, "--data-dir", e.dir, "--kek-file", e.kek)
		srv.stop(t)
		warned := strings.Contains(srv.stderr.String(), "data directory")
		if warned != (c.mode&0o077 != 0) {
			t.Errorf("serve with a %04o data directory: warned %v:\n%s", c.mode, warned, srv.stderr.String())
		}
	}
}
