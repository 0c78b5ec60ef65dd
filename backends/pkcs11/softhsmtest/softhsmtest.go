// Package softhsmtest gives tests a private SoftHSM2 token: its own
// configuration file and token directory under t.TempDir(), initialized
// with softhsm2-util. When SoftHSM2 is not installed the test is skipped
// with a loud message, or fails when $CI is true.
package softhsmtest

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
)

// Fixed credentials of the test token.
const (
	Label = "keysvc-test"
	PIN   = "1234"
	SOPIN = "5678"
)

// Token is an initialized SoftHSM2 token.
type Token struct {
	Module   string // path of libsofthsm2.so
	Label    string
	PIN      string
	Conf     string // the SOFTHSM2_CONF file
	TokenDir string // directories.tokendir
}

// Env returns the environment entry a child process needs to see the token.
func (tk Token) Env() string { return "SOFTHSM2_CONF=" + tk.Conf }

// modulePaths are where distributions install SoftHSM2's module;
// $KEYSVC_TEST_PKCS11_MODULE comes first.
var modulePaths = []string{
	"/usr/lib/softhsm/libsofthsm2.so",
	"/usr/lib/x86_64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib/aarch64-linux-gnu/softhsm/libsofthsm2.so",
	"/usr/lib64/pkcs11/libsofthsm2.so",
	"/usr/local/lib/softhsm/libsofthsm2.so",
	"/opt/homebrew/lib/softhsm/libsofthsm2.so",
}

// Module returns the SoftHSM2 module path, skipping (or failing under
// CI=true) when SoftHSM2 is not installed.
func Module(t testing.TB) string {
	t.Helper()
	paths := modulePaths
	if p := os.Getenv("KEYSVC_TEST_PKCS11_MODULE"); p != "" {
		paths = append([]string{p}, paths...)
	}
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			if _, err := exec.LookPath("softhsm2-util"); err == nil {
				return p
			}
			missing(t, "softhsm2-util is not on $PATH")
		}
	}
	missing(t, "libsofthsm2.so not found (looked in $KEYSVC_TEST_PKCS11_MODULE and the usual places)")
	return ""
}

func missing(t testing.TB, why string) {
	t.Helper()
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); ci {
		t.Fatalf("softhsmtest: SoftHSM2 is required and CI=true, failing: %s (apt-get install softhsm2 opensc)", why)
	}
	t.Skipf("SKIPPING PKCS#11 tests: SoftHSM2 missing: %s (apt-get install softhsm2 opensc; with CI=true this fails)", why)
}

// New creates a SoftHSM2 configuration in t.TempDir(), points
// SOFTHSM2_CONF at it for this test (t.Setenv: not for parallel tests),
// and initializes a token labelled Label with PIN and SOPIN in the first
// free slot.
func New(t testing.TB) Token {
	t.Helper()
	module := Module(t)
	dir := t.TempDir()
	tk := Token{Module: module, Label: Label, PIN: PIN, Conf: filepath.Join(dir, "softhsm2.conf"), TokenDir: filepath.Join(dir, "tokens")}
	if err := os.MkdirAll(tk.TokenDir, 0o700); err != nil {
		t.Fatal(err)
	}
	conf := "directories.tokendir = " + tk.TokenDir + "\nobjectstore.backend = file\nlog.level = ERROR\nslots.removable = false\n"
	if err := os.WriteFile(tk.Conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("SOFTHSM2_CONF", tk.Conf)
	tk.Util(t, "--init-token", "--free", "--label", tk.Label, "--pin", tk.PIN, "--so-pin", SOPIN)
	return tk
}

// Util runs softhsm2-util with the token's configuration and returns its
// combined output; a failure fails the test.
func (tk Token) Util(t testing.TB, args ...string) string {
	t.Helper()
	cmd := exec.Command("softhsm2-util", args...)
	cmd.Env = append(os.Environ(), tk.Env())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("softhsm2-util %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// Backup copies the token directory to a new directory and returns it.
func (tk Token) Backup(t testing.TB) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "tokens-backup")
	if out, err := exec.Command("cp", "-a", tk.TokenDir, dst).CombinedOutput(); err != nil {
		t.Fatalf("backup token dir: %v\n%s", err, out)
	}
	return dst
}

// Restore replaces the token directory with a copy of backup.
func (tk Token) Restore(t testing.TB, backup string) {
	t.Helper()
	if err := os.RemoveAll(tk.TokenDir); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", backup, tk.TokenDir).CombinedOutput(); err != nil {
		t.Fatalf("restore token dir: %v\n%s", err, out)
	}
}
