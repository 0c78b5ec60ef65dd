package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/api"
)

func init() { extraCommands = append(extraCommands, newVersionCmd) }

// buildInfo is what this binary knows about its own build, from
// runtime/debug.ReadBuildInfo: the main module's version ("(devel)" for a
// go build in a checkout), the VCS revision and commit time with a
// "+dirty" flag when the tree had local changes (absent with
// -buildvcs=false), the Go version and the build flags that change the
// binary (-race, CGO_ENABLED, GOOS/GOARCH, -tags, -trimpath, -ldflags).
func buildInfo() api.BuildInfo {
	b := api.BuildInfo{Version: "unknown", Revision: "unknown", Time: "unknown"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.GoVersion = bi.GoVersion
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			modified = s.Value == "true"
		case "-race", "-tags", "-trimpath", "-ldflags", "-asan", "-msan", "CGO_ENABLED", "GOOS", "GOARCH", "GOAMD64", "GOARM64":
			if s.Value != "" {
				b.Flags = append(b.Flags, s.Key+"="+s.Value)
			}
		}
	}
	if modified && b.Revision != "unknown" {
		b.Revision += "+dirty"
	}
	return b
}

// printVersion writes the build information, one "name: value" a line.
func printVersion(w io.Writer, b api.BuildInfo) {
	fmt.Fprintf(w, "keysvc %s\nrevision: %s\ncommitted: %s\ngo: %s\n", b.Version, b.Revision, b.Time, b.GoVersion)
	for _, f := range b.Flags {
		fmt.Fprintf(w, "build: %s\n", f)
	}
}

func newVersionCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the module version, VCS revision and time, Go version and build flags (also: keysvc --version, /healthz, keysvc_build_info)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if asJSON {
				return printJSON(cmd.OutOrStdout(), buildInfo())
			}
			printVersion(cmd.OutOrStdout(), buildInfo())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}
