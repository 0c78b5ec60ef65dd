package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func init() { extraCommands = append(extraCommands, newConfigCmd) }

// applyConfig sets every flag of fs that the command line left unset from,
// in this order of precedence, the KEYSVC_* environment (KEYSVC_SIGN_LISTEN
// for --sign-listen) and the YAML file at path (keys are the flag names,
// e.g. `sign-listen: 10.0.0.5:8443`). Command-line flags win over both.
// An unknown key in the file, or a value a flag refuses, is an error.
// Loading and merging use github.com/knadh/koanf.
func applyConfig(fs *pflag.FlagSet, path string) error {
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	k := koanf.New("\x00") // flag names contain dots in no case; keep keys flat
	if path != "" {
		if err := k.Load(file.Provider(path), yaml.Parser()); err != nil {
			return fmt.Errorf("config file %s: %w", path, err)
		}
		var unknown []string
		for _, key := range k.Keys() {
			if !known[key] || key == "config" {
				unknown = append(unknown, key)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			return fmt.Errorf("config file %s: unknown key(s) %s (keys are the flag names of `keysvc serve --help`)", path, strings.Join(unknown, ", "))
		}
	}
	err := k.Load(env.Provider("\x00", env.Opt{Prefix: "KEYSVC_", TransformFunc: func(name, value string) (string, any) {
		key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "KEYSVC_"), "_", "-"))
		if !known[key] || key == "config" {
			return "", nil
		}
		return key, value
	}}), nil)
	if err != nil {
		return err
	}
	for _, key := range k.Keys() {
		f := fs.Lookup(key)
		if f == nil || f.Changed {
			continue
		}
		if err := fs.Set(key, k.String(key)); err != nil {
			return fmt.Errorf("configuration %s: %w", key, err)
		}
	}
	return nil
}

// secretKey reports configuration keys whose values must not be printed
// (PINs, passwords, secrets, tokens — not the files holding them, nor a
// PKCS#11 token label).
func secretKey(name string) bool {
	if strings.HasSuffix(name, "-file") || strings.HasSuffix(name, "-label") {
		return false
	}
	for _, s := range []string{"pin", "token", "secret", "password"} {
		if strings.Contains(name, s) {
			return true
		}
	}
	return false
}

// printEffective writes the effective serve configuration as YAML, sorted,
// with secrets redacted (database passwords, PINs, tokens).
func printEffective(w io.Writer, fs *pflag.FlagSet) {
	var lines []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" {
			return
		}
		v := f.Value.String()
		switch {
		case f.Name == "postgres-url":
			if v == "" {
				v = os.Getenv("KEYSVC_POSTGRES_URL")
			}
			v = redactURL(v)
		case secretKey(f.Name) && v != "":
			v = "REDACTED"
		}
		lines = append(lines, fmt.Sprintf("%s: %q", f.Name, v))
	})
	sort.Strings(lines)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Validate configuration files"}
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Validate a serve configuration file (with the KEYSVC_* environment) and print the effective configuration, secrets redacted",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			serve, o := newServeCmdWith()
			if err := serve.ParseFlags(nil); err != nil {
				return err
			}
			if err := applyConfig(serve.Flags(), args[0]); err != nil {
				return err
			}
			if err := o.validate(); err != nil {
				return err
			}
			printEffective(cmd.OutOrStdout(), serve.Flags())
			return nil
		},
	}
	cmd.AddCommand(check)
	return cmd
}
