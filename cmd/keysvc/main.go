// Command keysvc is the one keysvc binary: the service (serve), the admin
// CLI (keys, tokens), database migrations (migrate) and the receipt
// verifier (verify).
package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// exitError carries a process exit code through cobra without printing
// anything more (the command already wrote its output).
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "keysvc",
		Short:         "Signing keys for MCP servers, with verifiable key history",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newVerifyCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	return root
}

// extraCommands lets each command file register itself.
var extraCommands []func() *cobra.Command

func main() {
	err := newRootCmd().Execute()
	if err == nil {
		return
	}
	if e, ok := err.(exitError); ok {
		os.Exit(e.code)
	}
	fmt.Fprintln(os.Stderr, "keysvc:", err)
	os.Exit(1)
}
