package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/kms"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/kmstest"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// kmsKey creates key name on AWS KMS (ES256) and rotates it once: its
// retired first version and its active second.
func kmsKey(t *testing.T, c *client.Client, name string) (retired, active client.Version) {
	t.Helper()
	ctx := context.Background()
	_, v1, err := c.CreateKey(ctx, client.CreateKeyRequest{Name: name, Issuer: name + ".example", Algorithm: "ES256", Backend: "awskms"})
	if err != nil {
		t.Fatal(err)
	}
	v2, _, err := c.Rotate(ctx, name, "second version")
	if err != nil {
		t.Fatal(err)
	}
	return v1, v2
}

// kmsKeyState asks the emulator for the KeyState of the KMS key that
// backend reference ref names (Enabled, Disabled, PendingDeletion).
func kmsKeyState(t *testing.T, lk *kmstest.LocalKMS, ref string) string {
	t.Helper()
	r, err := awskms.ParseRef(ref)
	if err != nil {
		t.Fatal(err)
	}
	cl := kms.New(kms.Options{Region: lk.Region, BaseEndpoint: aws.String(lk.Endpoint),
		Credentials: credentials.NewStaticCredentialsProvider("AKIDKEYSVCTEST", "keysvc-test-secret", "")})
	out, err := cl.DescribeKey(context.Background(), &kms.DescribeKeyInput{KeyId: aws.String(r.KeyID)})
	if err != nil {
		t.Fatalf("DescribeKey %s: %v", r.KeyID, err)
	}
	return string(out.KeyMetadata.KeyState)
}

// anchoredKMS is serve with AWS KMS (the emulator), a log and key-history
// anchoring, on SQLite or (pgURL) PostgreSQL, and an officer's
// environment for the offline awskms commands.
type anchoredKMS struct {
	lk       *kmstest.LocalKMS
	logSrv   *tlogServer
	e        *lifecycleEnv
	keyFile  string
	env      []string
	officer  []string
	anchored []string // --anchor-key-file and --tlog-url, as serve runs with
}

func newAnchoredKMS(t *testing.T, pgURL string) *anchoredKMS {
	t.Helper()
	k := &anchoredKMS{lk: kmstest.StartLocalKMS(t), logSrv: startTlogServer(t, t.TempDir())}
	t.Cleanup(func() { k.logSrv.stop(t) })
	k.e = newLifecycleEnv(t, pgURL)
	k.keyFile = filepath.Join(k.e.dir, "anchor-key.json")
	if _, errOut, code := runCLI(t, nil, "anchor", "keygen", "--out", k.keyFile); code != 0 {
		t.Fatalf("anchor keygen: %s", errOut)
	}
	k.env = append(awskmsEnv(t), k.e.env...)
	k.officer = append(append([]string{}, k.env...), "KEYSVC_AWSKMS_ENDPOINT="+k.lk.Endpoint)
	k.anchored = []string{"--anchor-key-file", k.keyFile, "--tlog-url", k.logSrv.URL}
	return k
}

// serve starts serve on it.
func (k *anchoredKMS) serve(t *testing.T) *server {
	return startServer(t, k.env, "--data-dir", k.e.dir, "--kek-file", k.e.kek, "--jwks-max-age", "0s",
		"--reload-interval", "300ms", "--tlog-url", k.logSrv.URL, "--anchor-key-file", k.keyFile, "--anchor-check-interval", "300ms",
		"--awskms-region", k.lk.Region, "--awskms-endpoint", k.lk.Endpoint, "--awskms-timeout", "5s")
}

// sqlite opens its SQLite key history, as a database writer would.
func (k *anchoredKMS) sqlite(t *testing.T) (store.Store, dbWriter) {
	st, err := store.Open(context.Background(), store.Config{SQLitePath: filepath.Join(k.e.dir, "keysvc.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dbWriter{st: st}
}

// TestAnchoredDestroyLocksBeforeTheBackend: a destroy calls the
// backend's DestroyKey with the version's backend reference. It did so
// with the row as read with the key's state, before the write where the
// anchored store checks it, so the 409 came after the irreversible step
// (an attack review, session 47):
//   - "active key of another key": a retired KMS version's backend_ref and
//     public_jwk pointed at another key's ACTIVE KMS key; the refused
//     destroy had scheduled its deletion;
//   - "reference only, at a disabled key": only backend_ref altered,
//     pointing at a KMS key an officer disabled (awskms.DestroyKey does
//     not compare public keys for a disabled key).
//
// Now the destroy locks and checks the version (store.Tx.LockVersion)
// before the backend is called: 409 key_history_not_backed, and KMS is
// not asked to do anything.
func TestAnchoredDestroyLocksBeforeTheBackend(t *testing.T) {
	ctx := context.Background()
	k := newAnchoredKMS(t, "")
	lk, logSrv, e, keyFile, officer := k.lk, k.logSrv, k.e, k.keyFile, k.officer
	serve := func() *server { return k.serve(t) }
	srv := serve()
	c := client.New(srv.URL, e.token)
	_, db := k.sqlite(t)

	notBacked := func(t *testing.T, err error) {
		t.Helper()
		var ce *client.Error
		if !errors.As(err, &ce) || ce.Status != 409 || ce.Code != "key_history_not_backed" {
			t.Errorf("destroy of a tampered version: %v; want 409 key_history_not_backed\n%s", err, lastLines(srv.stderr.String(), 15))
		}
	}

	t.Run("active key of another key", func(t *testing.T) {
		x, _ := kmsKey(t, c, "villa")
		_, y := kmsKey(t, c, "other")
		waitReadyz(t, srv, true, "ready")
		if s := kmsKeyState(t, lk, y.BackendRef); s != "Enabled" {
			t.Fatalf("other's active KMS key: %s", s)
		}
		yRow, xRow := db.version(t, y.KID), db.version(t, x.KID)
		db.exec(t, `UPDATE key_versions SET backend_ref = ?, public_jwk = ? WHERE kid = ?`, yRow.BackendRef, string(yRow.PublicJWK), x.KID)
		waitReadyz(t, srv, false, x.KID)
		_, err := c.DestroyVersion(ctx, x.KID, "retired; no longer needed", 7)
		notBacked(t, err)
		if s := kmsKeyState(t, lk, y.BackendRef); s != "Enabled" {
			t.Errorf("a refused destroy of %s left the ACTIVE KMS key of %s (%s) %s", x.KID, y.KID, y.BackendRef, s)
		}
		if _, err := c.Sign(ctx, "other", map[string]any{"n": 1}, ""); err != nil {
			t.Errorf("signing with other after a refused destroy of villa's %s: %v", x.KID, err)
		}
		db.exec(t, `UPDATE key_versions SET backend_ref = ?, public_jwk = ? WHERE kid = ?`, xRow.BackendRef, string(xRow.PublicJWK), x.KID) // put back
	})

	t.Run("reference only, at a disabled key", func(t *testing.T) {
		x, _ := kmsKey(t, c, "villa2")
		z, _ := kmsKey(t, c, "spare")
		if out, errOut, code := runCLI(t, officer, "awskms", "disable", z.KID, "--data-dir", e.dir, "--reason", "kill switch while investigating",
			"--anchor-key-file", keyFile, "--tlog-url", logSrv.URL); code != 0 {
			t.Fatalf("awskms disable: %s%s", out, errOut)
		}
		if s := kmsKeyState(t, lk, z.BackendRef); s != "Disabled" {
			t.Fatalf("spare's disabled key: %s", s)
		}
		// A later start (a restart, another replica): the backend's
		// public-key cache does not hold the disabled key.
		srv.stop(t)
		srv = serve()
		c = client.New(srv.URL, e.token)
		db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, z.BackendRef, x.KID)
		_, err := c.DestroyVersion(ctx, x.KID, "retired; no longer needed", 7)
		notBacked(t, err)
		if s := kmsKeyState(t, lk, z.BackendRef); s != "Disabled" {
			t.Errorf("a refused destroy of %s (backend_ref altered only) left the KMS key of %s %s", x.KID, z.KID, s)
		}
	})
}

// TestAnchoredOfflineKMSCommands: `keysvc awskms schedule-deletion` and
// `keysvc awskms disable` open key history directly and act on a
// version's backend_ref. They read it as stored: a database writer who
// pointed a retired version at the active version's KMS key made the
// officer's routine schedule-deletion of the retired version delete the
// key that signs (an attack review, session 47). Now, on anchored key
// history, they need the event key and the logs (as serve runs with), and
// refuse a version or key the log does not back; put back, they act.
func TestAnchoredOfflineKMSCommands(t *testing.T) {
	ctx := context.Background()
	k := newAnchoredKMS(t, "")
	lk, e, officer := k.lk, k.e, k.officer
	srv := k.serve(t)
	c := client.New(srv.URL, e.token)
	_, db := k.sqlite(t)
	anchored := k.anchored

	v1, v2 := kmsKey(t, c, "villa")
	waitReadyz(t, srv, true, "ready")
	orig := db.version(t, v1.KID)
	db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, v2.BackendRef, v1.KID)
	waitReadyz(t, srv, false, v1.KID) // serve sees the tampering

	schedule := func(extra ...string) (string, string, int) {
		return runCLI(t, officer, append([]string{"awskms", "schedule-deletion", v1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "retired; routine clean-up"}, extra...)...)
	}
	if out, errOut, code := schedule(); code == 0 || !strings.Contains(errOut, "key history is anchored in a transparency log") {
		t.Errorf("schedule-deletion on anchored history without the event key: exit %d\n%s%s", code, out, errOut)
	}
	want := "refusing to act on " + v1.KID + ": key history as stored is not what the transparency log backs: version " + v1.KID + ": its backend reference as stored"
	if out, errOut, code := schedule(anchored...); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("schedule-deletion of a version pointed at the active key: exit %d\n%s%s\nwant %q", code, out, errOut, want)
	}
	if out, errOut, code := runCLI(t, officer, append([]string{"awskms", "disable", v1.KID, "--data-dir", e.dir, "--reason", "kill switch"}, anchored...)...); code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("disable of a version pointed at the active key: exit %d\n%s%s", code, out, errOut)
	}
	if s := kmsKeyState(t, lk, v2.BackendRef); s != "Enabled" {
		t.Fatalf("the active version %s's KMS key after the refused commands: %s", v2.KID, s)
	}
	if _, err := c.Sign(ctx, "villa", map[string]any{"n": 1}, ""); err != nil {
		t.Errorf("signing with villa after the refused commands: %v", err)
	}

	db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, orig.BackendRef, v1.KID)
	if out, errOut, code := schedule(anchored...); code != 0 {
		t.Fatalf("schedule-deletion of %s put back: exit %d\n%s%s", v1.KID, code, out, errOut)
	}
	if s := kmsKeyState(t, lk, v1.BackendRef); s != "PendingDeletion" {
		t.Errorf("%s's KMS key after its schedule-deletion: %s", v1.KID, s)
	}
	if s := kmsKeyState(t, lk, v2.BackendRef); s != "Enabled" {
		t.Errorf("the active version %s's KMS key: %s", v2.KID, s)
	}
	// The command's audit row is anchored: audit verify finds every row so.
	if out, errOut, code := runCLI(t, nil, append([]string{"audit", "verify", "--data-dir", e.dir}, anchored...)...); code != 0 {
		t.Errorf("audit verify after the command: exit %d\n%s%s", code, out, errOut)
	}
}

// TestAnchoredOfflineKMSEmptiedAnchorEvents: whether key history is
// anchored was decided from anchor_events, which the database writer
// controls: with the version pointed at the active key and anchor_events
// emptied, schedule-deletion without the event key checked nothing and
// deleted the key that signs (an attack review, session 47). Now only the
// operator's --unanchored skips the check, and with the event key the
// logs answer for the emptied table.
func TestAnchoredOfflineKMSEmptiedAnchorEvents(t *testing.T) {
	k := newAnchoredKMS(t, "")
	lk, logSrv, e, keyFile, officer := k.lk, k.logSrv, k.e, k.keyFile, k.officer
	srv := k.serve(t)
	c := client.New(srv.URL, e.token)
	_, db := k.sqlite(t)

	v1, v2 := kmsKey(t, c, "villa")
	waitReadyz(t, srv, true, "ready")
	evKey, err := anchor.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	bm, err := evKey.BackendMarker(v1.KID)
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "v1's backend marker in the log", func() bool {
		code, _ := proofFor(logSrv.URL, tlogclient.FormatHash(bm.Hash))
		return code == 200
	})
	db.exec(t, `UPDATE key_versions SET backend_ref = ? WHERE kid = ?`, v2.BackendRef, v1.KID)
	db.exec(t, `DELETE FROM anchor_events`)
	waitReadyz(t, srv, false, v1.KID) // serve still sees the tampering

	schedule := func(extra ...string) (string, string, int) {
		return runCLI(t, officer, append([]string{"awskms", "schedule-deletion", v1.KID, "--pending-days", "7", "--data-dir", e.dir, "--reason", "retired; routine clean-up"}, extra...)...)
	}
	if out, errOut, code := schedule(); code == 0 || !strings.Contains(errOut, "or --unanchored when serve runs without key-history anchoring") {
		t.Errorf("schedule-deletion without the event key, anchor_events emptied: exit %d\n%s%s", code, out, errOut)
	}
	if out, errOut, code := schedule("--anchor-key-file", keyFile, "--tlog-url", logSrv.URL); code == 0 || !strings.Contains(errOut, "refusing to act on "+v1.KID) {
		t.Errorf("schedule-deletion with the event key, anchor_events emptied: exit %d\n%s%s", code, out, errOut)
	}
	if s := kmsKeyState(t, lk, v2.BackendRef); s != "Enabled" {
		t.Errorf("the ACTIVE version %s's KMS key is %s after the offline commands", v2.KID, s)
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
