package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

func stateHead(n uint64) tlogfmt.ArchivedSTH {
	return tlogfmt.ArchivedSTH{TreeSize: n, STH: "sth-" + string(rune('a'+n)), Checkpoint: "checkpoint"}
}

func readStateFile(t *testing.T, path string) tlogfmt.ArchivedSTH {
	t.Helper()
	var kept tlogfmt.ArchivedSTH
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &kept) != nil {
		t.Fatalf("state file: %s %v", b, err)
	}
	return kept
}

// TestAuditStateRunsTakeTurns: a run holds the --state file's lock from
// before it reads the file until after it writes it. An overlapping run
// waits, then starts from the tree the first one kept; it gives up when
// its context (--deadline) ends first. (Session 45 locked only the
// write: two runs could start from one tree, be shown two forks of the
// log, and the larger fork was kept without being checked against the
// smaller.)
func TestAuditStateRunsTakeTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-state.json")
	first, err := openAuditState(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if first.from != nil {
		t.Fatalf("a new state file read as %+v", first.from)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err = openAuditState(ctx, path)
	if !errors.Is(err, ErrLockHeld) || !strings.Contains(err.Error(), "another tlog audit with this file is still running") || !strings.Contains(err.Error(), path+".lock") {
		t.Fatalf("a second run while the first holds the file: %v; want ErrLockHeld naming %s.lock", err, path)
	}

	type opened struct {
		st  *auditState
		err error
	}
	second := make(chan opened, 1)
	go func() {
		st, err := openAuditState(context.Background(), path)
		second <- opened{st, err}
	}()
	select {
	case o := <-second:
		t.Fatalf("the second run got the file while the first held it: %+v", o)
	case <-time.After(3 * lockRetry):
	}
	if err := first.save(stateHead(6)); err != nil {
		t.Fatal(err)
	}
	first.close()
	o := <-second
	if o.err != nil {
		t.Fatal(o.err)
	}
	defer o.st.close()
	if o.st.from == nil || *o.st.from != stateHead(6) {
		t.Fatalf("the second run started from %+v; want the tree the first kept (size 6)", o.st.from)
	}
	if err := o.st.save(stateHead(9)); err != nil {
		t.Fatal(err)
	}
	if got := readStateFile(t, path); got != stateHead(9) {
		t.Fatalf("state file holds %+v, want tree 9", got)
	}
}

// TestAuditStateSaveLeavesChangedFiles: a run writes the file only when
// it still holds what the run read. A file written meanwhile by something
// that does not take the lock, or damaged, is left as it is; a newest
// tree below the one the run started from is refused.
func TestAuditStateSaveLeavesChangedFiles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "audit-state.json")
	if err := writeFileAtomic(path, []byte(`{"tree_size":6,"sth":"sth-g","checkpoint":"checkpoint"}`+"\n")); err != nil {
		t.Fatal(err)
	}
	open := func() *auditState {
		t.Helper()
		st, err := openAuditState(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(st.close)
		return st
	}

	st := open()
	if st.from == nil || *st.from != stateHead(6) {
		t.Fatalf("read %+v, want tree 6", st.from)
	}
	if err := st.save(stateHead(3)); err == nil || !strings.Contains(err.Error(), "smaller than the one it started from (6)") {
		t.Fatalf("saving tree 3 over tree 6: %v", err)
	}
	lockless, _ := json.Marshal(stateHead(9))
	if err := os.WriteFile(path, lockless, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.save(stateHead(12)); err == nil || !strings.Contains(err.Error(), "changed during the audit") {
		t.Fatalf("saving over a file changed during the run: %v", err)
	}
	if got := readStateFile(t, path); got != stateHead(9) {
		t.Fatalf("a file changed during the run was replaced: %+v", got)
	}
	st.close()

	st = open()
	if err := os.WriteFile(path, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.save(stateHead(12)); err == nil || !strings.Contains(err.Error(), "left as it is") {
		t.Fatalf("saving over a damaged file: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{" {
		t.Fatalf("a damaged state file was replaced: %q", b)
	}
}

// TestAuditStateFollowsSymlinks: FILE may be a symbolic link, also to a
// file the first run creates. The file it leads to is replaced and
// locked; the link stays a link.
func TestAuditStateFollowsSymlinks(t *testing.T) {
	dir, target := t.TempDir(), filepath.Join(t.TempDir(), "kept", "audit-state.json")
	if err := os.Mkdir(filepath.Dir(target), 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "state.json")
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	// A relative link to the first link: two levels.
	link2 := filepath.Join(dir, "state2.json")
	if err := os.Symlink("state.json", link2); err != nil {
		t.Fatal(err)
	}
	for i, p := range []string{link, link2} {
		st, err := openAuditState(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if st.path != target {
			t.Fatalf("%s resolved to %s, want %s", p, st.path, target)
		}
		if err := st.save(stateHead(uint64(5 + i))); err != nil {
			t.Fatal(err)
		}
		st.close()
	}
	if fi, err := os.Lstat(link); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Fatalf("the link was replaced: %v %v", fi, err)
	}
	if got := readStateFile(t, target); got != stateHead(6) {
		t.Fatalf("the link's target holds %+v, want tree 6", got)
	}
	if _, err := os.Stat(target + ".lock"); err != nil {
		t.Fatalf("the lock is not beside the file the link leads to: %v", err)
	}

	// A relative link in a directory reached through a symbolic link:
	// "../audit-state.json" is beside the real directory, as the kernel
	// reads it, not beside the link's spelling of it. (From an attack
	// review, session 46: the first version joined the target to the
	// spelling, read no state there, so the whole archive was audited
	// from scratch, which a log that rewrote its history passes, and
	// wrote the rewrite's tree to that other file.)
	root := t.TempDir()
	realDir := filepath.Join(root, "srv", "monitor", "conf")
	if err := os.MkdirAll(realDir, 0o700); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(root, "srv", "monitor", "audit-state.json")
	b, _ := json.Marshal(stateHead(6))
	if err := os.WriteFile(kept, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../audit-state.json", filepath.Join(realDir, "state.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(realDir, filepath.Join(root, "etc")); err != nil {
		t.Fatal(err)
	}
	// And a link whose target passes through that directory link and
	// back up: "etc/../x" is root/srv/monitor/x to the kernel.
	if err := os.Symlink("etc/../audit-state.json", filepath.Join(root, "via-etc.json")); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(root, "etc", "state.json"), filepath.Join(root, "via-etc.json")} {
		if got, err := os.ReadFile(p); err != nil || string(got) != string(b) {
			t.Fatalf("setup: the kernel reads %s as %q %v", p, got, err)
		}
		st, err := openAuditState(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if st.path != kept || st.from == nil || *st.from != stateHead(6) {
			t.Fatalf("--state %s, which the kernel reads as tree 6 in %s, resolved to %s and read as %+v", p, kept, st.path, st.from)
		}
		st.close()
	}

	loop := filepath.Join(dir, "loop.json")
	if err := os.Symlink("loop.json", loop); err != nil {
		t.Fatal(err)
	}
	if _, err := openAuditState(context.Background(), loop); err == nil || !strings.Contains(err.Error(), "too many levels of symbolic links") {
		t.Fatalf("a link to itself: %v", err)
	}
}

// TestTlogAuditWaitsForTheStateLock: the CLI gives up on a --state file
// another run holds when --deadline passes: exit 2, before asking the
// log anything (the URL here answers nothing).
func TestTlogAuditWaitsForTheStateLock(t *testing.T) {
	pub, _, _ := ed25519.GenerateKey(rand.Reader)
	key, err := tlogfmt.NewLogKey("log.example.test/lock", pub)
	if err != nil {
		t.Fatal(err)
	}
	vkey, err := key.VKey()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "audit-state.json")
	held, err := openAuditState(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.close()
	start := time.Now()
	out, stderr, code := runCLI(t, nil, "tlog", "audit", "http://127.0.0.1:9/", "--log-key", vkey, "--state", path, "--deadline", "500ms")
	if code != 2 || out != "" || !strings.Contains(stderr, "keysvc: audit could not run: --state: another tlog audit with this file is still running: "+path+".lock") {
		t.Fatalf("exit %d\n%s%s", code, out, stderr)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("gave up after %s, before --deadline (500ms)", took)
	}
}
