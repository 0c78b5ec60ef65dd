package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Exit statuses of every keysvc command (ADR 0031): 0 success, 1 the
// command ran and failed (or found a problem), 2 the command line is wrong
// (unknown command or flag, missing or stray argument, missing required
// flag, missing confirmation) and nothing was done. verify and receipt
// prove keep their documented meaning of 2 (partially verified); a usage
// error there exits 1 (annotation usageExitAnnotation). tlog audit's 2
// means "the audit could not run", which a usage error is: it exits 2,
// and 1 stays the verdict INCONSISTENT or STALE alone.
const (
	exitUsage           = 2
	usageExitAnnotation = "keysvc/usage-exit"
)

// usageError is a command-line mistake: the message names the fix, and
// the process exits exitUsage (or the command's usageExitAnnotation).
type usageError struct {
	cmd *cobra.Command
	msg string
}

func (e *usageError) Error() string { return e.msg }

// usage returns a usageError for cmd; the message is followed by a
// "Run 'keysvc … --help' for usage." line when printed.
func usage(cmd *cobra.Command, format string, a ...any) error {
	return &usageError{cmd: cmd, msg: fmt.Sprintf(format, a...)}
}

// exitCodeOf maps an error returned by Execute to the process exit status
// and writes its message (with the help hint for usage errors) to w.
func exitCodeOf(w io.Writer, err error) int {
	if err == nil {
		return 0
	}
	var ee exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	var ue *usageError
	if errors.As(err, &ue) {
		fmt.Fprintln(w, "keysvc:", ue.msg)
		code := exitUsage
		if ue.cmd != nil {
			fmt.Fprintf(w, "Run '%s --help' for usage.\n", ue.cmd.CommandPath())
			for c := ue.cmd; c != nil; c = c.Parent() {
				if c.Annotations[usageExitAnnotation] == "1" {
					code = 1
					break
				}
			}
		}
		return code
	}
	fmt.Fprintln(w, "keysvc:", err)
	return 1
}

// unknownCommand is the usage error of name given to the command group c
// as a command: the closest command's name (Levenshtein distance 2), or
// the list of them.
func unknownCommand(c *cobra.Command, name string) error {
	msg := fmt.Sprintf("unknown command %q for %q", name, c.CommandPath())
	if s := c.SuggestionsFor(name); len(s) > 0 {
		msg += fmt.Sprintf(" (did you mean %q?)", c.CommandPath()+" "+s[0])
	} else {
		msg += "; commands: " + strings.Join(subcommandNames(c), ", ")
	}
	return usage(c, "%s", msg)
}

// finalizeCLI walks the command tree once all commands are added and makes
// every command strict:
//   - a command group (subcommands, no action of its own) refuses an
//     unknown subcommand with "did you mean" suggestions, and a missing
//     one, instead of printing its help and exiting 0;
//   - an action without positional arguments in its Use refuses stray
//     arguments; argument-count errors name the missing argument;
//   - flag errors and missing required flags are usage errors.
func finalizeCLI(root *cobra.Command) {
	root.SuggestionsMinimumDistance = 2
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// "keysvc audit verfy --data-dir D": cobra stops at the group
		// ("audit"), whose flags lack --data-dir. The mistyped command
		// is the mistake to name, not the flag.
		if args := c.Flags().Args(); c.HasSubCommands() && len(args) > 0 {
			return unknownCommand(c, args[0])
		}
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "unknown flag: --"); ok {
			if s := suggestFlag(c, name); s != "" {
				msg += fmt.Sprintf(" (did you mean --%s?)", s)
			}
		}
		return usage(c, "%s", msg)
	})
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		switch c.CommandPath() {
		case "keysvc verify", "keysvc receipt prove":
			if c.Annotations == nil {
				c.Annotations = map[string]string{}
			}
			c.Annotations[usageExitAnnotation] = "1"
		}
		c.SilenceUsage, c.SilenceErrors = true, true
		c.SuggestionsMinimumDistance = 2
		if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
			c.Args = func(c *cobra.Command, args []string) error {
				if len(args) == 0 {
					return nil
				}
				return unknownCommand(c, args[0])
			}
			c.RunE = func(c *cobra.Command, _ []string) error {
				return usage(c, "%q needs a command: %s", c.CommandPath(), strings.Join(subcommandNames(c), ", "))
			}
			// Its help shows "keysvc keys [command]", not a runnable
			// "keysvc keys [flags]" (the RunE above only refuses).
			c.SetUsageTemplate(strings.Replace(c.UsageTemplate(), "{{if .Runnable}}", "{{if and .Runnable (not .HasAvailableSubCommands)}}", 1))
		} else if c.Runnable() {
			names := argNames(c.Use)
			inner := c.Args
			if inner == nil && len(names) == 0 {
				inner = cobra.NoArgs
			}
			if inner != nil {
				c.Args = func(c *cobra.Command, args []string) error {
					if err := inner(c, args); err != nil {
						return argsUsage(c, names, args, err)
					}
					return nil
				}
			}
			pre := c.PreRunE
			c.PreRunE = func(c *cobra.Command, args []string) error {
				if err := c.ValidateRequiredFlags(); err != nil {
					return usage(c, "%s", requiredFlagMessage(c, err))
				}
				if pre != nil {
					return pre(c, args)
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

func subcommandNames(c *cobra.Command) []string {
	var out []string
	for _, s := range c.Commands() {
		if s.IsAvailableCommand() {
			out = append(out, s.Name())
		}
	}
	return out
}

// argNames returns the positional arguments a Use line names: its
// upper-case words after the command name (NAME, KID, RECEIPT.json …).
func argNames(use string) []string {
	var out []string
	for _, w := range strings.Fields(use)[1:] {
		if strings.HasPrefix(w, "-") || strings.HasPrefix(w, "[") || strings.HasPrefix(w, "(") {
			break
		}
		if w != strings.ToLower(w) {
			out = append(out, strings.TrimSuffix(w, "..."))
		}
	}
	return out
}

// argsUsage explains an argument-count mistake.
func argsUsage(c *cobra.Command, names, args []string, err error) error {
	switch {
	case len(names) == 0 && len(args) == 0, len(names) > 0 && len(args) == len(names):
		return usage(c, "%s", err) // not a count mistake: the validator's own words
	case len(names) == 0:
		return usage(c, "%q takes no arguments, got %q", c.CommandPath(), args[0])
	case len(args) < len(names):
		return usage(c, "%q needs %s: %s %s", c.CommandPath(), strings.Join(names[len(args):], " and "), c.CommandPath(), strings.Join(names, " "))
	default:
		return usage(c, "%q takes %d argument(s) (%s), got %d: unexpected %q", c.CommandPath(), len(names), strings.Join(names, " "), len(args), args[len(names)])
	}
}

// requiredFlagMessage rewrites cobra's "required flag(s) "a", "b" not set"
// as the flags to add with what they mean.
func requiredFlagMessage(c *cobra.Command, err error) string {
	var missing []string
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if _, req := f.Annotations[cobra.BashCompOneRequiredFlag]; req && !f.Changed {
			missing = append(missing, fmt.Sprintf("--%s (%s)", f.Name, f.Usage))
		}
	})
	if len(missing) == 0 {
		return err.Error()
	}
	return fmt.Sprintf("%q needs %s", c.CommandPath(), strings.Join(missing, " and "))
}

// suggestFlag returns the flag of c closest to name (Levenshtein distance
// at most 2), or "".
func suggestFlag(c *cobra.Command, name string) string {
	if i := strings.IndexByte(name, '='); i >= 0 {
		name = name[:i]
	}
	best, bestD := "", 3
	c.Flags().VisitAll(func(f *pflag.Flag) {
		if d := levenshtein(name, f.Name); d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best == "" {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if best == "" && len(name) >= 3 && strings.HasPrefix(f.Name, name) {
				best = f.Name
			}
		})
	}
	return best
}

func levenshtein(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev = cur
	}
	return prev[len(b)]
}

// confirmFlags are the --reason and --yes of an irreversible or emergency
// action (keys destroy, keys revoke, keys rotate --now).
type confirmFlags struct {
	reason string
	yes    bool
}

func (f *confirmFlags) register(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&f.reason, "reason", "", "why (required; recorded in the audit trail and the server log)")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation ("+what+"); for scripts")
}

// stdinIsTerminal is replaced in tests.
var stdinIsTerminal = func() bool { return isTerminal(os.Stdin.Fd()) }

// confirm requires a non-empty --reason and then --yes, or "yes" typed on
// a terminal, before an irreversible action described by action. Without a
// terminal and without --yes it refuses, so a script never hangs on a
// prompt nor proceeds unconfirmed.
func (f *confirmFlags) confirm(cmd *cobra.Command, action string) error {
	if strings.TrimSpace(f.reason) == "" {
		return usage(cmd, "%q needs --reason TEXT: %s is recorded in the audit trail with who did it and why", cmd.CommandPath(), action)
	}
	if f.yes {
		return nil
	}
	if !stdinIsTerminal() {
		return usage(cmd, "%s cannot be undone: add --yes to confirm (standard input is not a terminal, so keysvc cannot ask)", action)
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s cannot be undone.\nReason: %s\nType yes to continue: ", action, f.reason)
	line, _ := bufio.NewReader(cmd.InOrStdin()).ReadString('\n')
	if strings.TrimSpace(line) != "yes" {
		return usage(cmd, "not confirmed: nothing was done (type yes, or pass --yes)")
	}
	return nil
}
