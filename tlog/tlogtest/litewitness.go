package tlogtest

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The TCP port range witnesses started by these helpers listen on (the operator tests' allocation, 22000–22999; the upper
// half is left to the log servers).
const (
	litewitnessPortLow  = 22500
	litewitnessPortHigh = 22999
)

// Litewitness is a running litewitness process, with its own ssh-agent
// holding its Ed25519 key. Nothing of keysvc runs in it.
type Litewitness struct {
	// Name is the witness name (its cosignature key name).
	Name string
	// VKey is the witness's C2SP signed-note verifier key
	// (cosignature/v1), as litewitness printed it.
	VKey string
	// URL is the witness's base URL (the log POSTs to URL/add-checkpoint).
	URL string
	// DB is the litewitness SQLite database path.
	DB string

	witnessctl string
	cmd, agent *exec.Cmd
	args       []string
	bin        string
	stderr     *SyncBuffer
}

// toolBinary finds a tool: $envVar, then PATH, then $(go env GOPATH)/bin,
// then /root/go/bin.
func toolBinary(envVar, name string) string {
	if p := os.Getenv(envVar); p != "" {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	for _, dir := range []string{os.Getenv("GOPATH"), filepath.Join(os.Getenv("HOME"), "go"), "/root/go"} {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, "bin", name)
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// need finds a tool or stops the test: under CI=true a missing tool fails
// the test; elsewhere it is skipped with a loud message.
func need(t testing.TB, envVar, name, install string) string {
	t.Helper()
	p := toolBinary(envVar, name)
	if p != "" {
		return p
	}
	msg := fmt.Sprintf("%s not found ($%s, PATH, GOPATH/bin): install it with %s", name, envVar, install)
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip("SKIPPING (a real witness is needed): " + msg)
	return ""
}

const litewitnessInstall = "GOTOOLCHAIN=go1.27.3 go install filippo.io/torchwood/cmd/litewitness@v0.10.0 filippo.io/torchwood/cmd/witnessctl@v0.10.0"

// StartLitewitness starts a litewitness (filippo.io/torchwood/cmd/litewitness
// v0.10.0) on 127.0.0.1 with a fresh Ed25519 key in a dedicated ssh-agent
// (Debian's openssh-client), named name. It is stopped when the test ends.
// Register logs with AddLog. Binaries: $KEYSVC_LITEWITNESS_BIN and
// $KEYSVC_WITNESSCTL_BIN, else PATH or GOPATH/bin.
func StartLitewitness(t testing.TB, name string) *Litewitness {
	t.Helper()
	lwBin := need(t, "KEYSVC_LITEWITNESS_BIN", "litewitness", litewitnessInstall)
	ctlBin := need(t, "KEYSVC_WITNESSCTL_BIN", "witnessctl", litewitnessInstall)
	agentBin := need(t, "KEYSVC_SSH_AGENT_BIN", "ssh-agent", "apt-get install openssh-client")
	keygen := need(t, "KEYSVC_SSH_KEYGEN_BIN", "ssh-keygen", "apt-get install openssh-client")
	addBin := need(t, "KEYSVC_SSH_ADD_BIN", "ssh-add", "apt-get install openssh-client")

	// A short directory: the ssh-agent socket path must fit sun_path.
	dir, err := os.MkdirTemp("", "lw")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	keyFile := filepath.Join(dir, "key")
	if out, err := exec.Command(keygen, "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v: %s", err, out)
	}
	out, err := exec.Command(keygen, "-l", "-E", "sha256", "-f", keyFile+".pub").Output()
	if err != nil {
		t.Fatalf("ssh-keygen -l: %v", err)
	}
	fields := strings.Fields(string(out))
	if len(fields) < 2 || !strings.HasPrefix(fields[1], "SHA256:") {
		t.Fatalf("ssh-keygen -l printed %q", out)
	}
	fingerprint := fields[1]

	sock := filepath.Join(dir, "agent.sock")
	agent := exec.Command(agentBin, "-D", "-a", sock)
	agent.Stdout, agent.Stderr = io.Discard, io.Discard
	if err := agent.Start(); err != nil {
		t.Fatalf("ssh-agent: %v", err)
	}
	t.Cleanup(func() { agent.Process.Kill(); agent.Wait() })
	for i := 0; ; i++ {
		if _, err := os.Stat(sock); err == nil {
			break
		}
		if i > 100 {
			t.Fatal("ssh-agent socket did not appear")
		}
		time.Sleep(20 * time.Millisecond)
	}
	add := exec.Command(addBin, "-q", keyFile)
	add.Env = append(os.Environ(), "SSH_AUTH_SOCK="+sock)
	if out, err := add.CombinedOutput(); err != nil {
		t.Fatalf("ssh-add: %v: %s", err, out)
	}

	w := &Litewitness{Name: name, DB: filepath.Join(dir, "witness.db"), witnessctl: ctlBin, agent: agent}
	var port int
	for tries := 0; ; tries++ {
		port = litewitnessPortLow + rand.IntN(litewitnessPortHigh-litewitnessPortLow+1)
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			l.Close()
			break
		}
		if tries > 50 {
			t.Fatal("no free port for litewitness")
		}
	}
	w.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
	w.stderr = &SyncBuffer{}
	w.bin = lwBin
	w.args = []string{"-db", w.DB, "-name", name, "-key", fingerprint, "-ssh-agent", sock, "-listen", fmt.Sprintf("127.0.0.1:%d", port)}
	t.Cleanup(w.stop)
	w.start(t)
	return w
}

// Restart starts the stopped witness again: same key, database and port.
func (w *Litewitness) Restart(t testing.TB) {
	t.Helper()
	w.stop()
	w.start(t)
}

func (w *Litewitness) start(t testing.TB) {
	t.Helper()
	w.cmd = exec.Command(w.bin, w.args...)
	w.cmd.Stdout, w.cmd.Stderr = w.stderr, w.stderr
	if err := w.cmd.Start(); err != nil {
		t.Fatalf("litewitness: %v", err)
	}
	vkeyRE := regexp.MustCompile(`vkey=(\S+)`)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := vkeyRE.FindStringSubmatch(w.stderr.String()); m != nil {
			w.VKey = strings.Trim(m[1], `"`)
		}
		if w.VKey != "" {
			if resp, err := http.Get(w.URL + "/"); err == nil {
				resp.Body.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("litewitness did not start:\n%s", w.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// AddLog registers a log with the witness (witnessctl add-log, add-key):
// origin and its verifier key.
func (w *Litewitness) AddLog(t testing.TB, origin, vkey string) {
	t.Helper()
	for _, args := range [][]string{
		{"add-log", "-db", w.DB, "-origin", origin},
		{"add-key", "-db", w.DB, "-origin", origin, "-key", vkey},
	} {
		if out, err := exec.Command(w.witnessctl, args...).CombinedOutput(); err != nil {
			t.Fatalf("witnessctl %s: %v: %s", args[0], err, out)
		}
	}
}

// Stderr returns what litewitness logged so far.
func (w *Litewitness) Stderr() string { return w.stderr.String() }

// Stop kills the witness (not its ssh-agent); it stays stopped.
func (w *Litewitness) Stop() { w.stop() }

func (w *Litewitness) stop() {
	if w.cmd.ProcessState == nil {
		w.cmd.Process.Kill()
		w.cmd.Wait()
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers (a process's
// stderr, a logger's handler) and a reader calling String.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

// Write implements io.Writer.
func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String returns what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
