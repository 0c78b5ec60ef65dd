package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/knadh/koanf/parsers/yaml"
	"github.com/knadh/koanf/providers/env/v2"
	"github.com/knadh/koanf/providers/file"
	"github.com/knadh/koanf/v2"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/store"
)

func init() { extraCommands = append(extraCommands, newConfigCmd) }

// applyConfig sets every flag of fs that the command line left unset from,
// in this order of precedence, the KEYSVC_* environment (KEYSVC_SIGN_LISTEN
// for --sign-listen) and the YAML file at path (keys are the flag names,
// e.g. `sign-listen: 10.0.0.5:8443`). Command-line flags win over both.
// An unknown key in the file, or a value a flag refuses, is an error
// naming the YAML key (or the variable) and the file.
// Loading and merging use github.com/knadh/koanf.
func applyConfig(fs *pflag.FlagSet, path string) error {
	_, err := applyConfigSources(fs, path)
	return err
}

// applyConfigSources is applyConfig, also returning where each value
// that is not a default or a command-line flag came from
// ("KEYSVC_RATE_LIMIT", "config file keysvc.yaml").
func applyConfigSources(fs *pflag.FlagSet, path string) (map[string]string, error) {
	known := map[string]bool{}
	fs.VisitAll(func(f *pflag.Flag) { known[f.Name] = true })
	fileK := koanf.New("\x00") // flag names contain dots in no case; keep keys flat
	if path != "" {
		if err := fileK.Load(file.Provider(path), yaml.Parser()); err != nil {
			return nil, fmt.Errorf("config file %s is not valid YAML: %w", path, err)
		}
		var unknown []string
		for _, key := range fileK.Keys() {
			if !known[key] || key == "config" {
				unknown = append(unknown, key)
			}
		}
		if len(unknown) > 0 {
			sort.Strings(unknown)
			var hints []string
			for _, u := range unknown {
				if s := closestName(u, known); s != "" {
					hints = append(hints, fmt.Sprintf("%s: did you mean %s?", u, s))
				}
			}
			hint := ""
			if len(hints) > 0 {
				hint = " (" + strings.Join(hints, "; ") + ")"
			}
			return nil, fmt.Errorf("config file %s: unknown key(s) %s%s; keys are the flag names of `keysvc serve --help` without the dashes", path, strings.Join(unknown, ", "), hint)
		}
	}
	envK := koanf.New("\x00")
	envName := map[string]string{}
	err := envK.Load(env.Provider("\x00", env.Opt{Prefix: "KEYSVC_", TransformFunc: func(name, value string) (string, any) {
		key := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, "KEYSVC_"), "_", "-"))
		if !known[key] || key == "config" {
			return "", nil
		}
		envName[key] = name
		return key, value
	}}), nil)
	if err != nil {
		return nil, err
	}
	sources := map[string]string{}
	set := func(k *koanf.Koanf, key, from, what string) error {
		f := fs.Lookup(key)
		if f == nil || f.Changed {
			return nil
		}
		// A YAML list sets a repeatable flag once per element
		// (tlog-url: [a, b]).
		values := []string{k.String(key)}
		if _, isList := k.Get(key).([]any); isList {
			values = k.Strings(key)
		}
		for _, v := range values {
			if err := fs.Set(key, v); err != nil {
				return fmt.Errorf("%s: %s %q: %w (%s)", from, what, v, err, f.Usage)
			}
		}
		sources[key] = from
		return nil
	}
	// The environment first: a set flag is Changed, so the file's value
	// of the same key is then skipped.
	for _, key := range envK.Keys() {
		if err := set(envK, key, envName[key], "value"); err != nil {
			return nil, err
		}
	}
	for _, key := range fileK.Keys() {
		if err := set(fileK, key, "config file "+path, "key "+key+": value"); err != nil {
			return nil, err
		}
	}
	return sources, nil
}

// closestName returns the name in names closest to s (Levenshtein
// distance at most 3), or "".
func closestName(s string, names map[string]bool) string {
	best, bestD := "", 4
	for n := range names {
		if d := levenshtein(s, n); d < bestD || (d == bestD && n < best) {
			best, bestD = n, d
		}
	}
	return best
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
// with typed values (numbers, booleans, lists; durations and strings as
// strings), secrets redacted (database passwords, PINs, tokens), and a
// comment naming where each value not a default came from.
func printEffective(w io.Writer, fs *pflag.FlagSet, sources map[string]string, o *serveOptions) {
	var lines []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "config" || f.Name == "help" {
			return
		}
		v := f.Value.String()
		var text string
		switch {
		case f.Name == "postgres-url":
			if v == "" {
				v = os.Getenv("KEYSVC_POSTGRES_URL")
			}
			text = strconv.Quote(store.RedactConnString(v))
		case secretKey(f.Name) && v != "":
			text = `"REDACTED"`
		default:
			text = yamlValue(f)
		}
		line := fmt.Sprintf("%s: %s", f.Name, text)
		var notes []string
		if f.Name == "default-prepublish" && o.defaultPrepublish == 0 {
			notes = append(notes, fmt.Sprintf("0s: twice jwks-max-age, %s", max(2*o.jwksMaxAge, time.Second)))
		}
		if f.Name == "gc-percent" && !f.Changed {
			if _, apply := gcPercentFor(o.gcPercent, false, os.Getenv("GOGC")); !apply {
				notes = append(notes, "not applied: GOGC="+os.Getenv("GOGC")+" is set and applies")
			}
		}
		if src := sources[f.Name]; src != "" {
			notes = append(notes, "from "+src)
		} else if f.Changed {
			notes = append(notes, "from the command line")
		}
		if len(notes) > 0 {
			line += "  # " + strings.Join(notes, "; ")
		}
		lines = append(lines, line)
	})
	sort.Strings(lines)
	fmt.Fprintln(w, strings.Join(lines, "\n"))
}

// yamlValue renders a flag's value as a typed YAML scalar or flow list.
func yamlValue(f *pflag.Flag) string {
	switch f.Value.Type() {
	case "bool", "int", "int64", "uint", "uint64", "float64", "float32", "int32":
		return f.Value.String()
	case "duration":
		return f.Value.String()
	case "stringSlice", "stringArray", "intSlice":
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return strconv.Quote(f.Value.String())
		}
		items := sv.GetSlice()
		out := make([]string, len(items))
		for i, it := range items {
			if f.Value.Type() == "intSlice" {
				out[i] = it
			} else {
				out[i] = strconv.Quote(it)
			}
		}
		return "[" + strings.Join(out, ", ") + "]"
	}
	return strconv.Quote(f.Value.String())
}

// hostProblems returns what keysvc serve would refuse about the host that
// flag values alone do not show: the data directory's mode, the KEK file,
// the PKCS#11 module and PIN file, files named by flags, the PostgreSQL
// URL. Nothing is created, opened for writing or connected to.
func (o *serveOptions) hostProblems(fs *pflag.FlagSet) []error {
	var out []error
	pg := o.store.config().PostgresURL
	if pg == "" || o.kekFile == "" || o.dev {
		if _, err := os.Stat(o.store.dataDir); err == nil {
			if _, err := checkDataDir(o.store.dataDir); err != nil {
				out = append(out, fmt.Errorf("data-dir: %w", err))
			}
		} else if !errors.Is(err, os.ErrNotExist) {
			out = append(out, fmt.Errorf("data-dir: %w", err))
		}
	}
	kek := o.kekFile
	if kek == "" {
		kek = filepath.Join(o.store.dataDir, "kek")
	}
	if _, err := software.ReadKEKFile(kek); err != nil && !(o.dev && errors.Is(err, os.ErrNotExist)) {
		fix := ""
		if errors.Is(err, os.ErrNotExist) {
			fix = fmt.Sprintf(" (create it: head -c 32 /dev/urandom | base64 > %s && chmod 600 %s; or dev: true on a development machine)", kek, kek)
		}
		out = append(out, fmt.Errorf("kek-file: %w%s", err, fix))
	}
	if pg != "" {
		if _, err := pgx.ParseConfig(pg); err != nil {
			why := "unparseable"
			if inner := errors.Unwrap(err); inner != nil && (pgPassword(pg) == "" || !strings.Contains(inner.Error(), pgPassword(pg))) {
				why = inner.Error()
			}
			out = append(out, fmt.Errorf("postgres-url %s: not a PostgreSQL URL (postgres://USER@HOST:5432/DB): %s", store.RedactConnString(pg), why))
		}
	}
	out = append(out, o.listenerHostProblems()...)
	for _, bf := range backendFactories {
		if bf.check == nil {
			continue
		}
		if err := bf.check(); err != nil {
			out = append(out, fmt.Errorf("backend %s: %w", bf.kind, err))
		}
	}
	// Every other file a flag names must be there and readable.
	fs.VisitAll(func(f *pflag.Flag) {
		v := f.Value.String()
		if v == "" || f.Name == "config" || f.Name == "kek-file" || f.Name == "pkcs11-module" || f.Name == "pkcs11-pin-file" || f.Value.Type() != "string" {
			return
		}
		if !strings.HasSuffix(f.Name, "-file") && !strings.HasSuffix(f.Name, "-cert") && !strings.HasSuffix(f.Name, "-tls-key") &&
			!strings.HasSuffix(f.Name, "-ca") && f.Name != "client-principals" {
			return
		}
		fh, err := os.Open(v)
		if err != nil {
			out = append(out, fmt.Errorf("%s: %w", f.Name, err))
			return
		}
		fh.Close()
	})
	return out
}

// listenerHostProblems binds each listener address and releases it at
// once: serve binds them before anything else and refuses to start on an
// address this host does not have (EADDRNOTAVAIL) or a host name that does
// not resolve. An address in use is not a problem here (a running serve
// holds it, and config check is run before a restart), nor is a privileged
// port (serve may run as another user, or with CAP_NET_BIND_SERVICE).
func (o *serveOptions) listenerHostProblems() []error {
	var out []error
	for _, l := range []struct{ flag, addr string }{{"listen", o.listen}, {"sign-listen", o.signListen}, {"admin-listen", o.adminListen}} {
		if l.addr == "" {
			continue
		}
		ln, err := net.Listen("tcp", l.addr)
		if err == nil {
			ln.Close()
			continue
		}
		var dns *net.DNSError
		switch {
		case errors.Is(err, syscall.EADDRNOTAVAIL):
			out = append(out, fmt.Errorf("%s %s: %w (not an address of this host)", l.flag, l.addr, err))
		case errors.As(err, &dns):
			out = append(out, fmt.Errorf("%s %s: %w", l.flag, l.addr, err))
		}
	}
	return out
}

func newConfigCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Validate configuration files"}
	var syntaxOnly bool
	check := &cobra.Command{
		Use:   "check FILE",
		Short: "Check a serve configuration file (with the KEYSVC_* environment) as serve would, without starting anything; print the effective configuration, secrets redacted, and a verdict",
		Long: `Check a keysvc serve configuration: the YAML file FILE, with the KEYSVC_*
environment over it (as serve reads them). Checked: the keys (flag names),
each value's type, the value rules serve applies (durations, limits,
listener addresses and conflicts, URLs, modes), and on this host what serve
would refuse at start: the data directory's mode, the KEK file (present,
mode 0600, 32 bytes), the PKCS#11 module and PIN file, TLS certificates and
keys, client CAs, the principals file, other files named, and each
listener address (bound and released at once: an address this host does
not have, or a host name that does not resolve, is a problem; one in use,
as by a running serve, is not). Nothing is created, started or connected
to (PostgreSQL, the HSM and KMS are not contacted: their reachability is
serve's /readyz).

Prints the effective configuration as YAML (typed values, secrets
REDACTED, "# from ..." naming the variable or file a value came from)
and a final verdict line. Exit status: 0 OK, 1 a problem (each is
printed), 2 a usage error.

--syntax-only checks the keys, types and value rules only and looks at
no file (for a configuration written for another host).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			serve, o := newServeCmdWith()
			if err := serve.ParseFlags(nil); err != nil {
				return err
			}
			if _, err := os.Stat(args[0]); err != nil {
				return fmt.Errorf("config file: %w", err)
			}
			sources, err := applyConfigSources(serve.Flags(), args[0])
			if err != nil {
				fmt.Fprintf(cmd.ErrOrStderr(), "problem: %v\n", err)
				return verdict(cmd, args[0], 1)
			}
			o.noFiles = syntaxOnly
			var problems []error
			if err := o.validate(); err != nil {
				problems = append(problems, keyNames(err, sources))
			}
			if !syntaxOnly {
				problems = append(problems, o.hostProblems(serve.Flags())...)
			}
			if len(problems) > 0 {
				for _, p := range problems {
					fmt.Fprintf(cmd.ErrOrStderr(), "problem: %v\n", p)
				}
				return verdict(cmd, args[0], len(problems))
			}
			printEffective(cmd.OutOrStdout(), serve.Flags(), sources, o)
			what := "keys, values and this host's files"
			if syntaxOnly {
				what = "keys and values only (--syntax-only: no file was looked at)"
			}
			fmt.Fprintf(cmd.OutOrStdout(), "# OK: keysvc serve would accept %s (checked: %s; nothing was started)\n", args[0], what)
			return nil
		},
	}
	check.Flags().BoolVar(&syntaxOnly, "syntax-only", false, "check keys, value types and value rules only; open no file (KEK, TLS, PKCS#11 module, PIN, data directory)")
	cmd.AddCommand(check)
	return cmd
}

// pgPassword returns the password of a postgres:// URL, "" if none, so an
// error that would show it is not printed.
func pgPassword(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return ""
	}
	p, _ := u.User.Password()
	return p
}

// verdict prints the failing verdict line and returns exit status 1.
func verdict(cmd *cobra.Command, file string, n int) error {
	fmt.Fprintf(cmd.ErrOrStderr(), "INVALID: keysvc serve would refuse %s (%d problem(s) above)\n", file, n)
	return exitError{code: 1}
}

// keyNames adds, to a validation error naming flags (--jwks-max-age), where
// each of those values was set, as YAML keys or variables.
func keyNames(err error, sources map[string]string) error {
	msg := err.Error()
	var where []string
	for key, src := range sources {
		if strings.Contains(msg, "--"+key+" ") || strings.HasSuffix(msg, "--"+key) || strings.Contains(msg, "--"+key+":") || strings.Contains(msg, "--"+key+",") {
			if strings.HasPrefix(src, "config file ") {
				where = append(where, fmt.Sprintf("YAML key %s in %s", key, strings.TrimPrefix(src, "config file ")))
			} else {
				where = append(where, fmt.Sprintf("%s from %s", key, src))
			}
		}
	}
	if len(where) == 0 {
		return err
	}
	sort.Strings(where)
	return fmt.Errorf("%s (set by: %s)", msg, strings.Join(where, ", "))
}
