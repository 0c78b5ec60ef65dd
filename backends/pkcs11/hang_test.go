package pkcs11

import (
	"bufio"
	"context"
	"crypto"
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11/softhsmtest"
	"github.com/keysvc/keysvc/signer"
)

// lockHelperEnv makes the test binary a helper process that takes POSIX
// write locks on every file of a token directory and holds them until
// killed. SoftHSM2 waits for those locks (F_SETLKW) whenever it reads its
// object files, so a Cryptoki call made meanwhile blocks inside the
// module: a real hang, not a simulated one.
const lockHelperEnv = "KEYSVC_PKCS11_LOCK_HELPER_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(lockHelperEnv); dir != "" {
		holdLocks(dir)
		return
	}
	os.Exit(m.Run())
}

func holdLocks(dir string) {
	files, _ := filepath.Glob(filepath.Join(dir, "*", "*"))
	var held []*os.File
	for _, name := range files {
		f, err := os.OpenFile(name, os.O_RDWR, 0)
		if err != nil {
			continue
		}
		lk := syscall.Flock_t{Type: syscall.F_WRLCK}
		if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLKW, &lk); err != nil {
			os.Stderr.WriteString("lock " + name + ": " + err.Error() + "\n")
			os.Exit(2)
		}
		held = append(held, f)
	}
	os.Stdout.WriteString("locked\n")
	time.Sleep(time.Hour)
	_ = held
}

// lockToken starts the helper on tk's token directory and returns a
// function that releases the locks (kills the helper).
func lockToken(t *testing.T, tk softhsmtest.Token) (release func()) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), lockHelperEnv+"="+tk.TokenDir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "locked\n" {
		_ = cmd.Process.Kill()
		t.Fatalf("lock helper: %q %v", line, err)
	}
	done := false
	release = func() {
		if !done {
			done = true
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}
	t.Cleanup(release)
	return release
}

// TestPKCS11HungToken makes SoftHSM2 block inside Cryptoki calls (another
// process holds the locks of the token's files): signing returns an error
// wrapping backends.ErrUnavailable after the timeout instead of hanging,
// Healthy fails, no more calls than there are sessions get stuck, and
// everything works again once the locks are released.
func TestPKCS11HungToken(t *testing.T) {
	tk := softhsmtest.New(t)
	cfg := testConfig(t, tk)
	cfg.Sessions, cfg.Timeout = 3, 500*time.Millisecond
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

	release := lockToken(t, tk)
	start := time.Now()
	for i := 0; i < 10; i++ {
		callStart := time.Now()
		_, err := s.Sign(rand.Reader, []byte("hung"), crypto.Hash(0))
		if !errors.Is(err, backends.ErrUnavailable) {
			t.Fatalf("sign %d on a hung token: %v, want backends.ErrUnavailable", i, err)
		}
		if took := time.Since(callStart); took > cfg.Timeout+300*time.Millisecond {
			t.Fatalf("sign %d took %s (timeout %s)", i, took, cfg.Timeout)
		}
		if i == 0 {
			t.Logf("on a hung token: %v", err)
		}
	}
	if n := b.stuck.Load(); n < 1 || n > int64(cfg.Sessions) {
		t.Fatalf("%d calls stuck; want between 1 and %d (the sessions)", n, cfg.Sessions)
	}
	if err := b.Healthy(ctx); !errors.Is(err, backends.ErrUnavailable) {
		t.Fatalf("Healthy on a hung token: %v", err)
	}
	t.Logf("10 signs and a health check on a hung token took %s; %d calls stuck", time.Since(start).Round(time.Millisecond), b.stuck.Load())

	release()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := signJWS(t, kid, signer.AlgEdDSA, s, []byte("after"))
		if err == nil && b.Healthy(ctx) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no recovery after the locks were released: %v / %v", err, b.Healthy(ctx))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for b.stuck.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d calls still stuck", b.stuck.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
