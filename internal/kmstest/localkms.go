package kmstest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// LocalKMSModule is the pinned third-party emulator (P-256, no Ed25519).
const LocalKMSModule = "github.com/nsmithuk/local-kms@v0.0.0-20260228092603-2a5e92d09ab6"

// LocalKMSBinEnv names a pre-built local-kms binary (.ci/run sets it).
const LocalKMSBinEnv = "KEYSVC_LOCAL_KMS_BIN"

// LocalKMS is a running local-kms emulator.
type LocalKMS struct {
	// Endpoint is where clients reach it: "http://127.0.0.1:PORT".
	Endpoint  string
	Region    string
	AccountID string
	// Isolated is true when the emulator runs in its own network namespace
	// (it binds every interface and has no option to do otherwise) and
	// Endpoint is a loopback proxy into it.
	Isolated bool
}

var (
	buildOnce sync.Once
	buildBin  string
	buildErr  error
)

// skipOrFail fails under CI=true (the dependency must be there) and skips,
// loudly, elsewhere.
func skipOrFail(t testing.TB, format string, a ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, a...)
	if os.Getenv("CI") == "true" {
		t.Fatalf("local-kms emulator required under CI=true: %s", msg)
	}
	t.Skipf("SKIPPING: local-kms emulator unavailable: %s (set %s to a built %s, or let the test build it with the Go toolchain)", msg, LocalKMSBinEnv, LocalKMSModule)
}

// LocalKMSBinary returns the emulator binary: $KEYSVC_LOCAL_KMS_BIN, else
// local-kms on PATH, else one built with `go install` (from the module
// cache or proxy) into the user cache directory, once per machine.
func LocalKMSBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv(LocalKMSBinEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			skipOrFail(t, "%s=%s: %v", LocalKMSBinEnv, p, err)
		}
		return p
	}
	if p, err := exec.LookPath("local-kms"); err == nil {
		return p
	}
	buildOnce.Do(func() {
		// Built once per machine into a cache directory named by the
		// pinned version; concurrent test processes race benignly (rename).
		cache, err := os.UserCacheDir()
		if err != nil {
			cache = os.TempDir()
		}
		dir := filepath.Join(cache, "keysvc", "local-kms-"+LocalKMSModule[strings.LastIndex(LocalKMSModule, "-")+1:])
		bin := filepath.Join(dir, "local-kms")
		if _, err := os.Stat(bin); err == nil {
			buildBin = bin
			return
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			buildErr = err
			return
		}
		tmp, err := os.MkdirTemp(dir, "build-")
		if err != nil {
			buildErr = err
			return
		}
		defer os.RemoveAll(tmp)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, "go", "install", LocalKMSModule)
		cmd.Env = append(os.Environ(), "GOBIN="+tmp, "GOFLAGS=-buildvcs=false")
		cmd.Dir = tmp // go install pkg@version ignores the current module anyway
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go install %s: %v\n%s", LocalKMSModule, err, out)
			return
		}
		if err := os.Rename(filepath.Join(tmp, "local-kms"), bin); err != nil {
			buildErr = err
			return
		}
		buildBin = bin
	})
	if buildErr != nil {
		skipOrFail(t, "%v", buildErr)
	}
	return buildBin
}

var startedRE = regexp.MustCompile(`Local KMS started on [^:]*:(\d+)`)

// StartLocalKMS runs local-kms for the test and stops it at cleanup. As
// root on Linux it runs in a fresh network namespace, so it listens on
// nothing but that namespace's loopback, and Endpoint is a 127.0.0.1 proxy
// into it. Otherwise it runs on a free port of the host; its listener then
// binds every interface (local-kms has no bind-address option), which the
// test log says. KEYSVC_LOCAL_KMS_NETNS=0 forces the second mode.
func StartLocalKMS(t testing.TB) *LocalKMS {
	t.Helper()
	bin := LocalKMSBinary(t)
	l := &LocalKMS{Region: "us-east-1", AccountID: "111122223333"}
	isolate := os.Getenv("KEYSVC_LOCAL_KMS_NETNS") != "0" && netnsSupported()
	port := "4599" // fixed inside a private namespace
	if !isolate {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port = fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
		ln.Close()
	}
	dataDir := t.TempDir()
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"PORT="+port, "KMS_REGION="+l.Region, "KMS_ACCOUNT_ID="+l.AccountID,
		"KMS_DATA_PATH="+filepath.Join(dataDir, "data"), "KMS_SEED_PATH="+filepath.Join(dataDir, "no-seed.yaml"))
	if isolate {
		setNewNetns(cmd)
	}
	pr, pw := io.Pipe()
	var logMu sync.Mutex
	var logBuf strings.Builder
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		skipOrFail(t, "starting %s: %v", bin, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); pw.Close() }()
	started := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			logMu.Lock()
			logBuf.WriteString(sc.Text() + "\n")
			logMu.Unlock()
			if m := startedRE.FindStringSubmatch(sc.Text()); m != nil {
				select {
				case started <- m[1]:
				default:
				}
			}
		}
		_, _ = io.Copy(io.Discard, pr)
	}()
	logs := func() string { logMu.Lock(); defer logMu.Unlock(); return logBuf.String() }
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-done
		}
	})
	select {
	case p := <-started:
		port = p
	case err := <-done:
		skipOrFail(t, "local-kms exited at start: %v\n%s", err, logs())
	case <-time.After(30 * time.Second):
		skipOrFail(t, "local-kms did not report listening within 30s\n%s", logs())
	}
	if !isolate {
		l.Endpoint = "http://127.0.0.1:" + port
		t.Logf("local-kms on %s (it binds all interfaces; run as root on Linux to confine it to a network namespace)", l.Endpoint)
		return l
	}
	ns := fmt.Sprintf("/proc/%d/ns/net", cmd.Process.Pid)
	if err := loopbackUp(ns); err != nil {
		skipOrFail(t, "bringing up loopback in the emulator's network namespace: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go proxy(ln, func() (net.Conn, error) { return dialInNetns(ns, "127.0.0.1:"+port) })
	l.Endpoint, l.Isolated = "http://"+ln.Addr().String(), true
	// Wait until the emulator answers through the proxy.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err == nil {
			_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
			_ = c.SetReadDeadline(time.Now().Add(time.Second))
			buf := make([]byte, 12)
			n, _ := io.ReadFull(c, buf)
			c.Close()
			if n == len(buf) && strings.HasPrefix(string(buf), "HTTP/1.") {
				break
			}
		}
		if time.Now().After(deadline) {
			skipOrFail(t, "local-kms does not answer through the namespace proxy\n%s", logs())
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("local-kms runs in its own network namespace (pid %d), reached through %s", cmd.Process.Pid, l.Endpoint)
	return l
}

// proxy accepts connections on ln and pipes each to a connection from dial.
func proxy(ln net.Listener, dial func() (net.Conn, error)) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := dial()
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); closeWrite(up); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); closeWrite(c); done <- struct{}{} }()
			<-done
			<-done
		}()
	}
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}
