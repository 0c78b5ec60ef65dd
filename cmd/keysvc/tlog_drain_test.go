package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog/tlogtest"
	"github.com/keysvc/keysvc/tlogclient"
)

// TestTlogDrain: `keysvc tlog drain` hands a stopped replica's spool to the
// log: every leaf in it reaches the log, a second drain owes nothing, and
// it refuses (exit 2, nothing delivered or deleted) a spool still held by
// a running process, a path with no spool, missing or empty (either would
// read as an empty spool that "owes nothing"), and a list of logs that
// leaves out one the spool still owes leaves to, unless --forget-unlisted.
func TestTlogDrain(t *testing.T) {
	logDir := t.TempDir()
	logSrv := startTlogServer(t, logDir)
	dataDir := t.TempDir()
	spoolDir := filepath.Join(dataDir, "tlog-spool")
	hl := mustHTTPLog(t, logSrv.URL)
	// A second log the replica was configured with (never reached here).
	const otherLog = "http://127.0.0.1:9/other-log"
	other := mustHTTPLog(t, otherLog+"/")

	// A replica's spool, written and left undelivered (the client never
	// ran its senders: the replica "died").
	sp, err := tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir})
	if err != nil {
		t.Fatal(err)
	}
	c, err := tlogclient.New(tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{hl, other}})
	if err != nil {
		t.Fatal(err)
	}
	jws := make([]string, 2500)
	for i := range jws {
		jws[i] = fmt.Sprintf("eyJdrain.%d.sig", i)
	}
	if err := c.RecordJWS(context.Background(), jws); err != nil {
		t.Fatal(err)
	}
	// Held by a live process: refused.
	_, errOut, code := runCLI(t, nil, "tlog", "drain", "--data-dir", dataDir, "--tlog-url", logSrv.URL)
	if code != 2 || !strings.Contains(errOut, "in use by another process") {
		t.Fatalf("drain of a held spool: exit %d, %s", code, errOut)
	}
	sp.Close()

	// No spool at the path: refused, and no directory is made there.
	missing := filepath.Join(t.TempDir(), "not-mounted")
	_, errOut, code = runCLI(t, nil, "tlog", "drain", "--data-dir", missing, "--tlog-url", logSrv.URL)
	if code != 2 || !strings.Contains(errOut, "no spool at "+filepath.Join(missing, "tlog-spool")) {
		t.Fatalf("drain of a missing spool: exit %d, %s", code, errOut)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Fatalf("drain of a missing spool made %s (%v)", missing, err)
	}
	// An empty directory (a mount point with nothing mounted) is no spool
	// either, and is left empty.
	empty := t.TempDir()
	_, errOut, code = runCLI(t, nil, "tlog", "drain", "--spool", empty, "--tlog-url", logSrv.URL)
	if code != 2 || !strings.Contains(errOut, "no spool at "+empty+": no LOCK file and no segment (is the replica's disk mounted there?)") {
		t.Fatalf("drain of an empty directory: exit %d, %s", code, errOut)
	}
	if ents, err := os.ReadDir(empty); err != nil || len(ents) != 0 {
		t.Fatalf("drain of an empty directory left %v (%v)", ents, err)
	}
	// The other log left off the list: refused, naming it and what it is owed.
	out, errOut, code := runCLI(t, nil, "tlog", "drain", "--data-dir", dataDir, "--tlog-url", logSrv.URL)
	if want := "keysvc: the spool owes leaves to logs not given with --tlog-url: " + otherLog + " (2500 leaves); give every log the replica was configured with, or --forget-unlisted to let those leaves go\n"; code != 2 || errOut != want || out != "" {
		t.Fatalf("drain without a configured log: exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errOut, want)
	}
	if got := logArtifacts(t, logSrv.URL); len(got) != 0 {
		t.Fatalf("a refused drain delivered %d leaves", len(got))
	}

	// The replica ran once more without the other log (its client starts
	// with the first log alone) and signed 500 more: those were never owed
	// to the other log, which is still owed its 2500, not 3000.
	sp, err = tlogclient.OpenSpool(tlogclient.SpoolOptions{Dir: spoolDir})
	if err != nil {
		t.Fatal(err)
	}
	c, err = tlogclient.New(tlogclient.Config{Spool: sp, Logs: []tlogclient.Log{hl}})
	if err != nil {
		t.Fatal(err)
	}
	more := make([]string, 500)
	for i := range more {
		more[i] = fmt.Sprintf("eyJdrain.after.%d.sig", i)
	}
	if err := c.RecordJWS(context.Background(), more); err != nil {
		t.Fatal(err)
	}
	sp.Close()
	jws = append(jws, more...)
	out, errOut, code = runCLI(t, nil, "tlog", "drain", "--data-dir", dataDir, "--tlog-url", logSrv.URL)
	if want := "keysvc: the spool owes leaves to logs not given with --tlog-url: " + otherLog + " (2500 leaves); give every log the replica was configured with, or --forget-unlisted to let those leaves go\n"; code != 2 || errOut != want || out != "" {
		t.Fatalf("drain after a run without the other log: exit %d\nstdout %q\nstderr %q\nwant %q", code, out, errOut, want)
	}

	out, errOut, code = runCLI(t, nil, "tlog", "drain", "--data-dir", dataDir, "--tlog-url", logSrv.URL, "--forget-unlisted")
	if code != 0 || !strings.Contains(out, "drained: 3000 leaves delivered to 1 logs in ") || !strings.HasSuffix(out, " owes the listed logs nothing; 2500 leaves owed to 1 unlisted log let go\n") ||
		!strings.Contains(errOut, `"msg":"transparency log: drain: leaves owed to an unlisted log are let go (--forget-unlisted)","log":"`+otherLog+`","leaves":2500`) {
		t.Fatalf("drain: exit %d\n%s\n%s", code, out, errOut)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		in := logArtifacts(t, logSrv.URL)
		missing := 0
		for _, j := range jws {
			if !in[tlogclient.HashArtifact(j)] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d drained leaves missing from the log", missing, len(jws))
		}
		time.Sleep(200 * time.Millisecond)
	}
	out, _, code = runCLI(t, nil, "tlog", "drain", "--spool", spoolDir, "--tlog-url", logSrv.URL+","+otherLog, "--timeout", "2s")
	if code != 1 || !strings.Contains(out, "not drained after") {
		t.Fatalf("drain to an unreachable listed log: exit %d\n%s", code, out)
	}
	out, _, code = runCLI(t, nil, "tlog", "drain", "--spool", spoolDir, "--tlog-url", logSrv.URL, "--forget-unlisted")
	if code != 0 || !strings.Contains(out, "drained: 0 leaves") {
		t.Fatalf("second drain: exit %d\n%s", code, out)
	}
	logSrv.stop(t)
	tlogtest.Fsck(t, logDir, logSrv.VKey)
}

// TestPlainHTTPRemote: serve warns about the log URLs whose keys a node
// without --tlog-log-keys would take from the URL itself with nothing
// protecting the path — plain HTTP to a host that is not loopback.
func TestPlainHTTPRemote(t *testing.T) {
	got := plainHTTPRemote([]string{
		"http://log.example.com",   // warned
		"https://log.example.com",  // TLS: the certificate vouches for the keys
		"http://127.0.0.1:8081",    // loopback
		"http://[::1]:8081",        // loopback
		"http://localhost:8081",    // loopback
		"http://10.0.0.7:8081/vrp", // warned: a network path
		"://bad",                   // not a URL: refused elsewhere, not here
	})
	want := []string{"http://log.example.com", "http://10.0.0.7:8081/vrp"}
	if !slices.Equal(got, want) {
		t.Fatalf("plainHTTPRemote = %q, want %q", got, want)
	}
}

// TestParseLogKeys: a --tlog-log-keys file must hold at least one key
// the verifier can use, and no private key material.
func TestParseLogKeys(t *testing.T) {
	const pub = `{"kty":"OKP","crv":"Ed25519","kid":"log-1","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}`
	const rsa = `{"kty":"RSA","kid":"rsa-1","n":"AQAB","e":"AQAB"}`
	for _, c := range []struct{ name, set, wantErr string }{
		{"one public key", `{"keys":[` + pub + `]}`, ""},
		{"a public key beside an unusable one", `{"keys":[` + rsa + `,` + pub + `]}`, ""},
		{"empty", `{"keys":[]}`, "no usable key (the set is empty)"},
		{"unusable keys only", `{"keys":[` + rsa + `]}`, "no usable key (1 in the set: key 0: "},
		{"private key", `{"keys":[` + pub[:len(pub)-1] + `,"d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"}]}`, `key 0 holds private key material ("d")`},
		// A member "Keys" beside "keys" (encoding/json matches names
		// without case) does not hide the private key from the check.
		{"private key beside a public one, and a decoy member", `{"keys":[` + pub[:len(pub)-1] + `,"d":"nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A"},` + pub + `],"Keys":[]}`, `key 0 holds private key material ("d")`},
		{"not a JWK Set", `[]`, "verifier: JWKS"},
	} {
		keys, err := parseLogKeys([]byte(c.set))
		switch {
		case c.wantErr == "" && (err != nil || len(keys.Keys) != 1 || keys.Keys[0].KeyID != "log-1"):
			t.Errorf("%s: %v %+v", c.name, err, keys)
		case c.wantErr != "" && (err == nil || !strings.Contains(err.Error(), c.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", c.name, err, c.wantErr)
		}
	}
}

// TestUnlistedErrorSpelling: an owed log whose URL differs from a listed
// one only in the host's spelling is pointed out; one on another port or
// path is not.
func TestUnlistedErrorSpelling(t *testing.T) {
	owed := map[string]uint64{"http://127.0.0.1:8090": 12, "https://log.example.com/v1": 1, "http://127.0.0.1:9000": 3}
	listed := []string{"http://localhost:8090", "https://LOG.example.com:443/v1", "http://localhost:9001"}
	const want = "the spool owes leaves to logs not given with --tlog-url: " +
		"http://127.0.0.1:8090 (12 leaves; you listed http://localhost:8090: give the URL as the replica's configuration spelled it), " +
		"http://127.0.0.1:9000 (3 leaves), " +
		"https://log.example.com/v1 (1 leaf; you listed https://LOG.example.com:443/v1: give the URL as the replica's configuration spelled it); " +
		"give every log the replica was configured with, or --forget-unlisted to let those leaves go"
	if got := unlistedError(owed, listed).Error(); got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}
