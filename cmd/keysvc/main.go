// Command keysvc is the one keysvc binary: the service (serve), the admin
// CLI (keys, tokens), database migrations (migrate) and the receipt
// verifier (verify).
package main

import (
	"fmt"
	"os"
	"strings"

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
		Version:       buildInfo().Version,
	}
	root.SetVersionTemplate("keysvc " + versionText())
	root.AddCommand(newVerifyCmd())
	for _, add := range extraCommands {
		root.AddCommand(add())
	}
	// cobra's own completion command is not part of keysvc's surface.
	root.CompletionOptions.DisableDefaultCmd = true
	root.SetHelpCommand(&cobra.Command{
		Use:   "help [command]",
		Short: "Help about any command",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || cmd == nil || len(rest) > 0 {
				return usage(c, "no help topic %q: keysvc help COMMAND, e.g. keysvc help keys rotate", strings.Join(args, " "))
			}
			return cmd.Help()
		},
	})
	finalizeCLI(root)
	return root
}

// versionText is `keysvc version` without its first word.
func versionText() string {
	var b strings.Builder
	printVersion(&b, buildInfo())
	return strings.TrimPrefix(b.String(), "keysvc ")
}

// extraCommands lets each command file register itself.
var extraCommands []func() *cobra.Command

func main() {
	os.Exit(exitCodeOf(os.Stderr, newRootCmd().Execute()))
}
