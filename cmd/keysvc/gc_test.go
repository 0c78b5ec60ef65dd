package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGCPercentFor: serve's --gc-percent (ADR 0041) wins when a flag,
// KEYSVC_GC_PERCENT or the config file set it; left at its default, a set
// GOGC is left to the runtime; otherwise the default applies.
func TestGCPercentFor(t *testing.T) {
	for _, c := range []struct {
		flag   int
		set    bool
		gogc   string
		want   int
		wantOK bool
	}{
		{defaultGCPercent, false, "", 400, true},
		{250, true, "", 250, true},
		{defaultGCPercent, false, "50", 0, false},
		{defaultGCPercent, false, "off", 0, false},
		{300, true, "50", 300, true},
		{defaultGCPercent, true, "50", 400, true}, // --gc-percent 400 given explicitly
	} {
		got, ok := gcPercentFor(c.flag, c.set, c.gogc)
		if got != c.want || ok != c.wantOK {
			t.Errorf("gcPercentFor(%d, %v, %q) = %d, %v; want %d, %v", c.flag, c.set, c.gogc, got, ok, c.want, c.wantOK)
		}
	}
}

// TestServeGCPercent runs serve and reads the percentage it applied from
// its start-up log line, for each source of the setting; a percentage
// below 1 is refused before anything starts.
func TestServeGCPercent(t *testing.T) {
	e := newLifecycleEnv(t, "")
	base := []string{"--data-dir", e.dir, "--kek-file", e.kek}
	for _, c := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"default", []string{"GOGC="}, nil, `"msg":"garbage collection","gc_percent":400}`},
		{"flag", []string{"GOGC=50"}, []string{"--gc-percent", "250"}, `"msg":"garbage collection","gc_percent":250}`},
		{"GOGC", []string{"GOGC=50"}, nil, `"msg":"garbage collection","gc_percent":50,"gogc":"50"}`},
		{"GOGC the runtime cannot parse", []string{"GOGC=abc"}, nil, `"msg":"garbage collection","gc_percent":100,"gogc":"abc"}`},
		{"KEYSVC_GC_PERCENT over GOGC", []string{"GOGC=50", "KEYSVC_GC_PERCENT=300"}, nil, `"msg":"garbage collection","gc_percent":300}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := startServer(t, c.env, append(append([]string{}, base...), c.args...)...)
			if log := srv.stderr.String(); !strings.Contains(log, c.want) {
				t.Fatalf("serve's log lacks %s:\n%s", c.want, log)
			}
		})
	}
	// config check says when GOGC, not the default, applies.
	cfg := filepath.Join(t.TempDir(), "keysvc.yaml")
	if err := os.WriteFile(cfg, []byte("listen: 127.0.0.1:9000\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, errOut, code := runCLI(t, []string{"GOGC=50"}, "config", "check", "--syntax-only", cfg)
	if code != 0 || !strings.Contains(out, "gc-percent: 400  # not applied: GOGC=50 is set and applies\n") {
		t.Fatalf("config check with GOGC=50: exit %d\n%s%s", code, out, errOut)
	}
	out, _, _ = runCLI(t, []string{"GOGC=50", "KEYSVC_GC_PERCENT=300"}, "config", "check", "--syntax-only", cfg)
	if !strings.Contains(out, "gc-percent: 300  # from KEYSVC_GC_PERCENT\n") {
		t.Fatalf("config check with KEYSVC_GC_PERCENT=300:\n%s", out)
	}
	_, errOut, code = runCLI(t, nil, append(append([]string{"serve"}, base...), "--gc-percent", "0")...)
	const want = "--gc-percent 0: must be at least 1"
	if code == 0 || !strings.Contains(errOut, want) {
		t.Fatalf("serve --gc-percent 0: exit %d, stderr %q; want a failure naming %q", code, errOut, want)
	}
}
