package pkcs11

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	p11 "github.com/miekg/pkcs11"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/signer"
)

func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func testConfig(t testing.TB, tk softhsmtest.Token) Config {
	return Config{ModulePath: tk.Module, TokenLabel: tk.Label, PIN: tk.PIN, Timeout: 3 * time.Second, Logger: testLogger(t)}
}

func openBackend(t testing.TB, cfg Config) *Backend {
	t.Helper()
	b, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// signJWS signs payload through signer.JWSSigner, the way keysvc signs,
// and verifies the compact JWS with Go's crypto against pub.
func signJWS(t testing.TB, kid, alg string, s crypto.Signer, payload []byte) error {
	j, err := signer.NewJWSSigner(kid, alg, s)
	if err != nil {
		return err
	}
	jws, err := j.Sign(payload, "")
	if err != nil {
		return err
	}
	return verifyCompact(jws, s.Public())
}

func verifyCompact(jws string, pub crypto.PublicKey) error {
	parts := strings.Split(jws, ".")
	if len(parts) != 3 {
		return errors.New("not a compact JWS")
	}
	sig, err := base64.RawURLEncoding.DecodeString(parts[2])
	if err != nil {
		return err
	}
	input := []byte(parts[0] + "." + parts[1])
	switch p := pub.(type) {
	case ed25519.PublicKey:
		if !ed25519.Verify(p, input, sig) {
			return errors.New("Ed25519 signature does not verify")
		}
	case *ecdsa.PublicKey:
		d := sha256.Sum256(input)
		if len(sig) != 64 || !ecdsa.Verify(p, d[:], new(big.Int).SetBytes(sig[:32]), new(big.Int).SetBytes(sig[32:])) {
			return errors.New("ES256 signature does not verify")
		}
	default:
		return fmt.Errorf("public key %T", pub)
	}
	return nil
}

// TestPKCS11CreateKeyAndSign generates an Ed25519 and a P-256 key pair in
// SoftHSM2, signs through the returned crypto.Signer (directly and via
// signer.JWSSigner) and verifies with crypto/ed25519 and crypto/ecdsa.
func TestPKCS11CreateKeyAndSign(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	for _, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		t.Run(alg, func(t *testing.T) {
			kid := "villaakerlyckan.se-2026-05-18-0" + map[string]string{signer.AlgEdDSA: "1", signer.AlgES256: "2"}[alg]
			h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
			if err != nil {
				t.Fatal(err)
			}
			if h.Sealed != nil {
				t.Fatal("Handle.Sealed must be nil for the PKCS#11 backend")
			}
			prefix := "pkcs11:token=keysvc-test;object=" + kid + ";id=%"
			suffix := ";type=private?module-path=" + tk.Module
			if !strings.HasPrefix(h.Ref, prefix) || !strings.HasSuffix(h.Ref, suffix) || len(h.Ref) != len(prefix)-1+keyIDSize*3+len(suffix) {
				t.Fatalf("Ref = %s", h.Ref)
			}
			s, err := b.Signer(ctx, kid, h)
			if err != nil {
				t.Fatal(err)
			}
			if !publicEqual(s.Public(), h.Public) {
				t.Fatal("Signer.Public differs from Handle.Public")
			}
			msg := []byte("offer:villaakerlyckan.se:2026-09-02/05")
			switch alg {
			case signer.AlgEdDSA:
				sig, err := s.Sign(rand.Reader, msg, crypto.Hash(0))
				if err != nil || !ed25519.Verify(h.Public.(ed25519.PublicKey), msg, sig) {
					t.Fatalf("Ed25519 signature does not verify with crypto/ed25519: %v", err)
				}
				if _, err := s.Sign(rand.Reader, msg, crypto.SHA512); err == nil {
					t.Fatal("Ed25519ph accepted")
				}
			case signer.AlgES256:
				d := sha256.Sum256(msg)
				der, err := s.Sign(rand.Reader, d[:], crypto.SHA256)
				if err != nil || !ecdsa.VerifyASN1(h.Public.(*ecdsa.PublicKey), d[:], der) {
					t.Fatalf("ES256 signature does not verify with crypto/ecdsa: %v", err)
				}
				if _, err := s.Sign(rand.Reader, msg, crypto.SHA256); err == nil {
					t.Fatal("a digest of the wrong size was accepted")
				}
			}
			if err := signJWS(t, kid, alg, s, []byte(`{"offer_id":"x"}`)); err != nil {
				t.Fatal(err)
			}
			// A second Signer for the same version (another replica, a
			// restart) finds the same object.
			s2, err := b.Signer(ctx, kid, h)
			if err != nil || signJWS(t, kid, alg, s2, []byte("again")) != nil {
				t.Fatalf("second signer: %v", err)
			}
		})
	}
}

// privateAttrs reads attributes of the private key object named by ref.
func privateAttrs(t *testing.T, b *Backend, ref string, types ...uint) ([]*p11.Attribute, error) {
	t.Helper()
	u, err := parseObjectURI(ref)
	if err != nil {
		t.Fatal(err)
	}
	var attrs []*p11.Attribute
	err = b.withSession(context.Background(), "test read", func(s *session) error {
		objs, err := s.findObjects(labelTemplate(p11.CKO_PRIVATE_KEY, u.Object, u.ID))
		if err != nil {
			return err
		}
		if len(objs) != 1 {
			return fmt.Errorf("%d private objects for %s", len(objs), ref)
		}
		var tmpl []*p11.Attribute
		for _, typ := range types {
			tmpl = append(tmpl, p11.NewAttribute(typ, nil))
		}
		attrs, err = s.c.GetAttributeValue(s.sh, objs[0], tmpl)
		if err != nil {
			return fmt.Errorf("read: %w", err) // not a session error: keep it
		}
		return nil
	})
	return attrs, err
}

// TestPKCS11PrivateKeyNeverLeaves reads the generated private key's attributes
// back with C_GetAttributeValue (CKA_SENSITIVE true, CKA_EXTRACTABLE false,
// CKA_VALUE refused) and lists the token's objects with pkcs11-tool: the
// private key object carries the kid label and is "sensitive ... never
// extractable".
func TestPKCS11PrivateKeyNeverLeaves(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	kid := "villaakerlyckan.se-2026-05-18-01"
	h, err := b.CreateKey(context.Background(), backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: signer.AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	attrs, err := privateAttrs(t, b, h.Ref, p11.CKA_SENSITIVE, p11.CKA_EXTRACTABLE, p11.CKA_PRIVATE, p11.CKA_TOKEN, p11.CKA_SIGN, p11.CKA_NEVER_EXTRACTABLE, p11.CKA_ALWAYS_SENSITIVE, p11.CKA_KEY_TYPE)
	if err != nil {
		t.Fatal(err)
	}
	want := map[uint]bool{p11.CKA_SENSITIVE: true, p11.CKA_EXTRACTABLE: false, p11.CKA_PRIVATE: true, p11.CKA_TOKEN: true, p11.CKA_SIGN: true, p11.CKA_NEVER_EXTRACTABLE: true, p11.CKA_ALWAYS_SENSITIVE: true}
	for _, a := range attrs {
		if a.Type == p11.CKA_KEY_TYPE {
			if attrUint(a) != ckkECEdwards {
				t.Errorf("CKA_KEY_TYPE = %x, want CKK_EC_EDWARDS", a.Value)
			}
			continue
		}
		if attrBool(a) != want[a.Type] {
			t.Errorf("attribute 0x%x = %x, want %v", a.Type, a.Value, want[a.Type])
		}
	}
	if _, err := privateAttrs(t, b, h.Ref, p11.CKA_VALUE); !errors.Is(err, p11.Error(p11.CKR_ATTRIBUTE_SENSITIVE)) {
		t.Fatalf("reading CKA_VALUE: %v, want CKR_ATTRIBUTE_SENSITIVE", err)
	}

	u, _ := parseObjectURI(h.Ref)
	out, err := exec.Command("pkcs11-tool", "--module", tk.Module, "--token-label", tk.Label, "--login", "--pin", tk.PIN, "--list-objects").CombinedOutput()
	if errors.Is(err, exec.ErrNotFound) {
		if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
			t.Fatal("pkcs11-tool (opensc) is required with CI=true")
		}
		t.Skip("SKIPPING the pkcs11-tool half: opensc is not installed")
	}
	if err != nil {
		t.Fatalf("pkcs11-tool: %v\n%s", err, out)
	}
	obj := pkcs11ToolObject(string(out), "Private Key Object", kid)
	if obj == nil {
		t.Fatalf("pkcs11-tool does not list a private key object labelled %s:\n%s", kid, out)
	}
	if !strings.Contains(obj["type"], "EC_EDWARDS") || obj["ID"] != hex.EncodeToString(u.ID) {
		t.Fatalf("pkcs11-tool object: %v", obj)
	}
	access := strings.Split(obj["Access"], ", ")
	if !contains(access, "sensitive") || !contains(access, "never extractable") || contains(access, "extractable") {
		t.Fatalf("pkcs11-tool Access: %q, want sensitive and never extractable, not extractable", obj["Access"])
	}
	if obj["Usage"] != "sign" {
		t.Fatalf("pkcs11-tool Usage: %q, want sign only", obj["Usage"])
	}
	if pkcs11ToolObject(string(out), "Public Key Object", kid) == nil {
		t.Fatalf("pkcs11-tool does not list the public key object:\n%s", out)
	}
}

// pkcs11ToolObject returns the fields of the object of kind ("Private Key
// Object") labelled label in `pkcs11-tool --list-objects` output.
func pkcs11ToolObject(out, kind, label string) map[string]string {
	var cur map[string]string
	var found map[string]string
	for _, line := range strings.Split(out, "\n") {
		if !strings.HasPrefix(line, " ") {
			if cur != nil && cur["label"] == label && found == nil {
				found = cur
			}
			cur = nil
			if k, typ, ok := strings.Cut(line, ";"); ok && k == kind {
				cur = map[string]string{"type": strings.TrimSpace(typ)}
			}
			continue
		}
		if cur != nil {
			if name, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				cur[name] = strings.TrimSpace(v)
			}
		}
	}
	if cur != nil && cur["label"] == label && found == nil {
		found = cur
	}
	return found
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestPKCS11ConcurrentSigners runs 64 goroutines signing for 10 s
// ($KEYSVC_PKCS11_STRESS_SECONDS overrides) through one backend, half with
// an Ed25519 key and half with a P-256 key, each signature verified: every
// one must be valid and none may fail.
func TestPKCS11ConcurrentSigners(t *testing.T) {
	seconds := 10
	if v, err := strconv.Atoi(os.Getenv("KEYSVC_PKCS11_STRESS_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	type key struct {
		kid, alg string
		j        *signer.JWSSigner
		pub      crypto.PublicKey
	}
	var keys []key
	for i, alg := range []string{signer.AlgEdDSA, signer.AlgES256} {
		kid := fmt.Sprintf("villaakerlyckan.se-2026-05-18-%02d", i+1)
		h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg})
		if err != nil {
			t.Fatal(err)
		}
		s, err := b.Signer(ctx, kid, h)
		if err != nil {
			t.Fatal(err)
		}
		j, err := signer.NewJWSSigner(kid, alg, s)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, key{kid, alg, j, h.Public})
	}
	const workers = 64
	var counts [2]atomic.Int64
	var failed atomic.Int64
	var firstErr atomic.Pointer[error]
	deadline := time.Now().Add(time.Duration(seconds) * time.Second)
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			k := keys[w%2]
			for n := 0; time.Now().Before(deadline); n++ {
				payload := []byte(fmt.Sprintf(`{"worker":%d,"n":%d}`, w, n))
				jws, err := k.j.Sign(payload, "")
				if err == nil {
					err = verifyCompact(jws, k.pub)
				}
				if err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, &err)
					continue
				}
				counts[w%2].Add(1)
			}
		}(w)
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		t.Fatalf("%d of %d signatures failed or did not verify; first: %v", n, n+counts[0].Load()+counts[1].Load(), *firstErr.Load())
	}
	ed, es := counts[0].Load(), counts[1].Load()
	if ed == 0 || es == 0 {
		t.Fatalf("no signatures: EdDSA %d, ES256 %d", ed, es)
	}
	t.Logf("%d goroutines, %s, %d sessions: %d valid signatures (EdDSA %d = %.0f/s, ES256 %d = %.0f/s, total %.0f/s, each verified)",
		workers, elapsed.Round(time.Millisecond), b.cfg.Sessions, ed+es, ed, float64(ed)/elapsed.Seconds(), es, float64(es)/elapsed.Seconds(), float64(ed+es)/elapsed.Seconds())
}

// TestStartupErrors: a wrong PIN, a missing token label and a missing
// module give errors an operator can act on, and the PIN appears nowhere.
func TestPKCS11StartupErrors(t *testing.T) {
	tk := softhsmtest.New(t)
	ctx := context.Background()

	cfg := testConfig(t, tk)
	cfg.PIN = "97531"
	_, err := Open(ctx, cfg)
	if err == nil {
		t.Fatal("Open with a wrong PIN succeeded")
	}
	if !errors.Is(err, ErrLoginFailed) || !strings.Contains(err.Error(), `PKCS#11 login to token "keysvc-test" failed: incorrect PIN`) {
		t.Fatalf("wrong PIN: %v", err)
	}
	if strings.Contains(err.Error(), cfg.PIN) {
		t.Fatalf("the error shows the PIN: %v", err)
	}

	cfg = testConfig(t, tk)
	cfg.TokenLabel = "no-such-token"
	_, err = Open(ctx, cfg)
	if !errors.Is(err, ErrTokenNotFound) || !errors.Is(err, backends.ErrUnavailable) ||
		!strings.Contains(err.Error(), `no PKCS#11 token labelled "no-such-token" in `+tk.Module+`; tokens present: "keysvc-test"`) {
		t.Fatalf("missing token: %v", err)
	}

	cfg = testConfig(t, tk)
	cfg.ModulePath = "/nonexistent/libvendor-pkcs11.so"
	if _, err = Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "PKCS#11 module /nonexistent/libvendor-pkcs11.so not found") {
		t.Fatalf("missing module: %v", err)
	}
	cfg.ModulePath = tk.Conf // exists, but is no shared library
	if _, err = Open(ctx, cfg); err == nil || !strings.Contains(err.Error(), "could not be loaded") {
		t.Fatalf("not a module: %v", err)
	}

	// After all that, the right PIN still works (the failures above did
	// not lock the token, and a failed Open left nothing behind).
	openBackend(t, testConfig(t, tk))
}

// TestPKCS11PINFile reads the PIN from a file, refusing group/other access.
func TestPKCS11PINFile(t *testing.T) {
	dir := t.TempDir()
	p := dir + "/pin"
	if err := os.WriteFile(p, []byte("1234\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if pin, err := ReadPINFile(p); err != nil || pin != "1234" {
		t.Fatalf("ReadPINFile = %q, %v", pin, err)
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadPINFile(p); err == nil || !strings.Contains(err.Error(), "chmod 600") || strings.Contains(err.Error(), "1234") {
		t.Fatalf("group-readable PIN file: %v", err)
	}
}

// TestPKCS11TokenRemovedAndRestored deletes the token under a running backend:
// signing fails within the timeout with an error wrapping
// backends.ErrUnavailable and Healthy fails; once the token directory is
// back, the same Signer signs again and Healthy passes, without a new Open.
func TestPKCS11TokenRemovedAndRestored(t *testing.T) {
	for _, how := range []string{"softhsm2-util --delete-token", "rm -rf tokendir"} {
		t.Run(how, func(t *testing.T) {
			tk := softhsmtest.New(t)
			cfg := testConfig(t, tk)
			cfg.Timeout = 2 * time.Second
			b := openBackend(t, cfg)
			ctx := context.Background()
			kid := "villaakerlyckan.se-2026-05-18-01"
			h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: signer.AlgEdDSA})
			if err != nil {
				t.Fatal(err)
			}
			s, err := b.Signer(ctx, kid, h)
			if err != nil {
				t.Fatal(err)
			}
			if err := signJWS(t, kid, signer.AlgEdDSA, s, []byte("before")); err != nil {
				t.Fatal(err)
			}
			backup := tk.Backup(t)

			if how == "rm -rf tokendir" {
				if err := os.RemoveAll(tk.TokenDir); err != nil {
					t.Fatal(err)
				}
			} else {
				tk.Util(t, "--delete-token", "--token", tk.Label)
			}
			start := time.Now()
			_, err = s.Sign(rand.Reader, []byte("after"), crypto.Hash(0))
			if took := time.Since(start); took > cfg.Timeout+500*time.Millisecond {
				t.Fatalf("sign took %s, more than the %s timeout", took, cfg.Timeout)
			}
			if !errors.Is(err, backends.ErrUnavailable) {
				t.Fatalf("sign without the token: %v, want an error wrapping backends.ErrUnavailable", err)
			}
			t.Logf("without the token: %v", err)
			if err := b.Healthy(ctx); !errors.Is(err, backends.ErrUnavailable) {
				t.Fatalf("Healthy without the token: %v", err)
			}
			// Further calls fail fast while the token is away.
			start = time.Now()
			for i := 0; i < 20; i++ {
				if _, err := s.Sign(rand.Reader, []byte("after"), crypto.Hash(0)); !errors.Is(err, backends.ErrUnavailable) {
					t.Fatalf("sign %d without the token: %v", i, err)
				}
			}
			if took := time.Since(start); took > cfg.Timeout {
				t.Fatalf("20 signs without the token took %s", took)
			}

			tk.Restore(t, backup)
			deadline := time.Now().Add(10 * time.Second)
			for {
				err := signJWS(t, kid, signer.AlgEdDSA, s, []byte("after restore"))
				if err == nil {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("signing did not recover within 10 s after the token came back: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err := b.Healthy(ctx); err != nil {
				t.Fatalf("Healthy after the token came back: %v", err)
			}
			t.Logf("recovered %s after the token directory was restored", time.Since(deadline.Add(-10*time.Second)).Round(time.Millisecond))
		})
	}
}

// TestPKCS11SessionsReopened closes every session of the application behind the
// pool's back (which also logs the user out): the next signatures reopen
// sessions, log in again and succeed.
func TestPKCS11SessionsReopened(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	kid := "villaakerlyckan.se-2026-05-18-01"
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: signer.AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	s, err := b.Signer(ctx, kid, h)
	if err != nil {
		t.Fatal(err)
	}
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for i := 0; i < 16; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- signJWS(t, kid, signer.AlgEdDSA, s, []byte("x"))
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		b.mod.callMu.RLock()
		err := b.mod.ctx.CloseAllSessions(b.state.Load().slot)
		b.mod.callMu.RUnlock()
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestPKCS11CallsNeverHang holds every session in calls that do not return (as
// a hung device would): callers get backends.ErrUnavailable after the
// timeout, at most Sessions calls are ever stuck, and the pool works again
// once they return.
func TestPKCS11CallsNeverHang(t *testing.T) {
	tk := softhsmtest.New(t)
	cfg := testConfig(t, tk)
	cfg.Sessions, cfg.Timeout = 2, 300*time.Millisecond
	b := openBackend(t, cfg)
	release := make(chan struct{})
	hang := func(*session) error { <-release; return nil }
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		start := time.Now()
		err := b.withSession(ctx, "hang", hang)
		if !errors.Is(err, backends.ErrUnavailable) || !strings.Contains(err.Error(), "timed out after 300ms") {
			t.Fatalf("hung call %d: %v", i, err)
		}
		if took := time.Since(start); took < cfg.Timeout || took > cfg.Timeout+200*time.Millisecond {
			t.Fatalf("hung call %d returned after %s", i, took)
		}
	}
	if n := b.stuck.Load(); n != 2 {
		t.Fatalf("%d calls stuck, want 2", n)
	}
	// Both sessions are held: more callers wait at most the timeout and do
	// not start more calls.
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			err := b.withSession(ctx, "sign", func(*session) error { t.Error("ran while every session was stuck"); return nil })
			if !errors.Is(err, backends.ErrUnavailable) || !strings.Contains(err.Error(), "no free session within 300ms (2 sessions, 2 calls stuck") {
				t.Errorf("call while stuck: %v", err)
			}
			if took := time.Since(start); took > cfg.Timeout+200*time.Millisecond {
				t.Errorf("call while stuck took %s", took)
			}
		}()
	}
	wg.Wait()
	if n := b.stuck.Load(); n != 2 {
		t.Fatalf("%d calls stuck, want still 2", n)
	}
	// A context deadline shorter than the timeout wins.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := b.withSession(short, "sign", func(*session) error { return nil }); !errors.Is(err, backends.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("short context: %v", err)
	}
	close(release)
	deadline := time.Now().Add(2 * time.Second)
	for b.stuck.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatal("stuck calls were not counted down")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := b.withSession(ctx, "sign", func(*session) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := b.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSignerChecksKey: a reference to another kid, a public key that is
// not the token's and a reference to a missing object are refused.
func TestPKCS11SignerChecksKey(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	kid := "villaakerlyckan.se-2026-05-18-01"
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: signer.AlgEdDSA})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Signer(ctx, "villaakerlyckan.se-2026-05-18-02", h); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("other kid: %v", err)
	}
	other, _, _ := ed25519.GenerateKey(rand.Reader)
	if _, err := b.Signer(ctx, kid, backends.Handle{Ref: h.Ref, Public: other}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("other public key: %v", err)
	}
	p256, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if _, err := b.Signer(ctx, kid, backends.Handle{Ref: h.Ref, Public: &p256.PublicKey}); !errors.Is(err, backends.ErrKeyMismatch) {
		t.Fatalf("P-256 public key for an Ed25519 object: %v", err)
	}
	u, _ := parseObjectURI(h.Ref)
	u.ID = []byte{1, 2, 3}
	if _, err := b.Signer(ctx, kid, backends.Handle{Ref: u.String(), Public: h.Public}); !errors.Is(err, backends.ErrUnavailable) || !strings.Contains(err.Error(), "holds no private key") {
		t.Fatalf("missing object: %v", err)
	}
	u, _ = parseObjectURI(h.Ref)
	u.Token = "elsewhere"
	if _, err := b.Signer(ctx, kid, backends.Handle{Ref: u.String(), Public: h.Public}); !errors.Is(err, backends.ErrUnavailable) {
		t.Fatalf("other token: %v", err)
	}
	// The backend still works after all the refusals.
	if s, err := b.Signer(ctx, kid, h); err != nil || signJWS(t, kid, signer.AlgEdDSA, s, []byte("ok")) != nil {
		t.Fatalf("signer: %v", err)
	}
}

// TestPKCS11Orphans lists token objects whose kid key history does not know —
// what a crash between CreateKey and the commit leaves — and deletes
// nothing.
func TestPKCS11Orphans(t *testing.T) {
	tk := softhsmtest.New(t)
	cfg := testConfig(t, tk)
	cfg.KeyLabelPrefix = "keysvc/"
	b := openBackend(t, cfg)
	ctx := context.Background()
	kids := []string{"villaakerlyckan.se-2026-05-18-01", "villaakerlyckan.se-2026-05-18-02", "villaakerlyckan.se-2026-05-18-03"}
	for i, kid := range kids {
		alg := signer.AlgEdDSA
		if i == 1 {
			alg = signer.AlgES256
		}
		if _, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: "villa", KID: kid, Algorithm: alg}); err != nil {
			t.Fatal(err)
		}
	}
	// An object without the prefix is not keysvc's.
	if err := b.withSession(ctx, "foreign", func(s *session) error {
		_, _, err := s.generate(signer.AlgEdDSA, "someone-else", []byte{9}, true)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{kids[0]: true}
	for round := 0; round < 2; round++ {
		got, err := b.Orphans(ctx, known)
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"keysvc/" + kids[1], "keysvc/" + kids[2]}; fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("Orphans = %v, want %v", got, want)
		}
	}
	got, err := b.Orphans(ctx, map[string]bool{kids[0]: true, kids[1]: true, kids[2]: true})
	if err != nil || len(got) != 0 {
		t.Fatalf("Orphans with every kid known = %v, %v", got, err)
	}
}

// TestPKCS11Import moves software keys (Ed25519 and P-256) into the token keeping
// their kid: the token signs, signatures verify under the original public
// keys, and the imported private key is sensitive and not extractable.
func TestPKCS11Import(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	ctx := context.Background()
	_, edKey, _ := ed25519.GenerateKey(rand.Reader)
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	for i, tc := range []struct {
		alg string
		key crypto.Signer
	}{{signer.AlgEdDSA, edKey}, {signer.AlgES256, ecKey}} {
		kid := fmt.Sprintf("villaakerlyckan.se-2026-01-01-%02d", i+1)
		h, err := b.Import(ctx, kid, tc.key)
		if err != nil {
			t.Fatalf("%s: %v", tc.alg, err)
		}
		if !publicEqual(h.Public, tc.key.Public()) {
			t.Fatalf("%s: public key changed", tc.alg)
		}
		s, err := b.Signer(ctx, kid, h)
		if err != nil {
			t.Fatal(err)
		}
		if err := signJWS(t, kid, tc.alg, s, []byte("moved")); err != nil {
			t.Fatalf("%s: %v", tc.alg, err)
		}
		attrs, err := privateAttrs(t, b, h.Ref, p11.CKA_SENSITIVE, p11.CKA_EXTRACTABLE)
		if err != nil || !attrBool(attrs[0]) || attrBool(attrs[1]) {
			t.Fatalf("%s: imported key attributes %v %v", tc.alg, attrs, err)
		}
		if _, err := b.Import(ctx, kid, tc.key); err == nil || !strings.Contains(err.Error(), "already holds") {
			t.Fatalf("%s: second import: %v", tc.alg, err)
		}
	}
}

// TestPKCS11Check describes the SoftHSM2 token and finds Ed25519 and ES256
// working with session keys that leave nothing behind.
func TestPKCS11Check(t *testing.T) {
	tk := softhsmtest.New(t)
	b := openBackend(t, testConfig(t, tk))
	r, err := b.Check(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r.Token.Label != tk.Label || r.Token.Manufacturer != "SoftHSM project" || r.Token.Model != "SoftHSM v2" || r.Token.Serial == "" {
		t.Fatalf("token: %+v", r.Token)
	}
	names := map[string]Mechanism{}
	for _, m := range r.Mechanisms {
		names[m.Name] = m
	}
	if m, ok := names["CKM_EDDSA"]; !ok || m.FlagNames() != "sign verify" {
		t.Fatalf("CKM_EDDSA: %+v (mechanisms %d)", m, len(r.Mechanisms))
	}
	if _, ok := names["CKM_EC_EDWARDS_KEY_PAIR_GEN"]; !ok {
		t.Fatal("no CKM_EC_EDWARDS_KEY_PAIR_GEN")
	}
	if len(r.Algorithms) != 2 || r.Algorithms[0].Err != nil || r.Algorithms[1].Err != nil {
		t.Fatalf("algorithms: %+v", r.Algorithms)
	}
	if orphans, err := b.Orphans(context.Background(), nil); err != nil || len(orphans) != 0 {
		t.Fatalf("check left objects behind: %v %v", orphans, err)
	}
}
