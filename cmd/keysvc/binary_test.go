package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	binOnce sync.Once
	binPath string
	binErr  error
	binDir  string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// keysvcBinary builds ./cmd/keysvc once per test run (with -race when the
// tests run with it) and returns its path.
func keysvcBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "keysvc-bin-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "keysvc")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build ./cmd/keysvc: %v\n%s", binErr, binPath)
	}
	return binPath
}

// runCLI runs the keysvc binary and returns stdout, stderr and the exit code.
func runCLI(t testing.TB, env []string, args ...string) (string, string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, keysvcBinary(t), args...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("keysvc %v: %v", args, err)
	}
	return stdout.String(), stderr.String(), code
}

// server is a running `keysvc serve` process.
type server struct {
	cmd *exec.Cmd
	URL string // the public listener (and every surface it also serves)
	// SignURL and AdminURL are the signing and admin listeners; equal to URL
	// when those surfaces share the public listener.
	SignURL, AdminURL string
	stderr            *lockedBuffer
	done              chan error
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startServer starts `keysvc serve --listen 127.0.0.1:0 args...` and waits
// for its "listening" log line. The process is stopped at test end.
func startServer(t *testing.T, env []string, args ...string) *server {
	t.Helper()
	cmd := exec.Command(keysvcBinary(t), append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	pr, pw := io.Pipe()
	s := &server{cmd: cmd, stderr: &lockedBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = io.MultiWriter(pw, s.stderr)
	cmd.Stdout = io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- cmd.Wait(); pw.Close() }()
	// One "listening" line per listener: public first, then sign/admin
	// when they have listeners of their own.
	want := 1
	for _, a := range args {
		if a == "--sign-listen" || a == "--admin-listen" {
			want++
		}
	}
	type listening struct{ surface, url string }
	addr := make(chan listening, 3)
	go func() {
		sc := bufio.NewScanner(pr)
		for n := 0; n < want && sc.Scan(); {
			var line struct {
				Msg, Addr, Surface string
				TLS                bool
			}
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "listening" {
				scheme := "http://"
				if line.TLS {
					scheme = "https://"
				}
				addr <- listening{line.Surface, scheme + line.Addr}
				n++
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	for got := 0; got < want; got++ {
		select {
		case l := <-addr:
			switch {
			case strings.HasPrefix(l.surface, "public"):
				s.URL, s.SignURL, s.AdminURL = l.url, l.url, l.url
			case l.surface == "sign":
				s.SignURL = l.url
			case l.surface == "admin":
				s.AdminURL = l.url
			}
		case err := <-s.done:
			t.Fatalf("keysvc serve exited early: %v\n%s", err, s.stderr.String())
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("keysvc serve did not start listening:\n%s", s.stderr.String())
		}
	}
	t.Cleanup(func() { s.stop(t) })
	return s
}

// stop sends SIGTERM and waits for a clean exit (idempotent).
func (s *server) stop(t testing.TB) {
	if s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		if err != nil && !strings.Contains(err.Error(), "signal") {
			t.Errorf("keysvc serve exited with %v\n%s", err, s.stderr.String())
		}
		s.done <- err
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		t.Errorf("keysvc serve did not stop on SIGTERM")
	}
}

// writeKEK writes a random-looking but fixed KEK file with mode 0600.
func writeKEK(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "kek")
	kek := bytes.Repeat([]byte{0x5a}, 32)
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(kek)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// httpGet returns the status and body of a GET.
func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}
