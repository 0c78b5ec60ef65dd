package main

import (
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestScanMaxTreeAgeDefault: --max-tree-age's 1h default holds a scanned
// tree to its witnesses' cosignatures; without --witness-keys it applies
// only when set, because an idle keysvc log keeps the STH time of when its
// tree size was first signed (a quiet, healthy log would otherwise fail).
func TestScanMaxTreeAgeDefault(t *testing.T) {
	for _, c := range []struct {
		name string
		args []string
		want time.Duration
	}{
		{"no witnesses, not set", nil, 0},
		{"no witnesses, set", []string{"--max-tree-age", "2h"}, 2 * time.Hour},
		{"witnesses, not set", []string{"--witness-keys", "w.txt"}, time.Hour},
		{"witnesses, set", []string{"--witness-keys", "w.txt", "--max-tree-age", "30m"}, 30 * time.Minute},
		{"witnesses, off", []string{"--witness-keys", "w.txt", "--max-tree-age", "0"}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := &auditAnchorFlags{}
			cmd := &cobra.Command{Use: "check"}
			f.register(cmd)
			args := append([]string{"--scan", "--anchor-key-file", "k.json", "--tlog-url", "https://log.example.com", "--tlog-log-keys", "keys.json"}, c.args...)
			if err := cmd.ParseFlags(args); err != nil {
				t.Fatal(err)
			}
			if err := f.checkScan(cmd); err != nil {
				t.Fatal(err)
			}
			if f.maxTreeAge != c.want || f.maxLogDelay != 15*time.Minute {
				t.Fatalf("--max-tree-age %v, --max-log-delay %v; want %v, 15m", f.maxTreeAge, f.maxLogDelay, c.want)
			}
		})
	}
}
