package main

//go:generate go run . docs --root ../..

import (
	"bytes"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"
)

func init() { extraCommands = append(extraCommands, newDocsCmd) }

// The generated documentation (ADR 0030): docs/cli/*.md and
// docs/cli/man/*.1 from the command definitions (cobra/doc), and the
// README's serve flag table between these markers.
const (
	docsCLIDir        = "docs/cli"
	docsManDir        = "docs/cli/man"
	readmeTableBegin  = "<!-- BEGIN generated: keysvc serve flags; go generate ./cmd/keysvc -->"
	readmeTableEnd    = "<!-- END generated -->"
	readmeFile        = "README.md"
	docsGeneratedNote = "Generated from the command definitions by `go generate ./cmd/keysvc` (ADR 0030); do not edit."
)

// docsDate is the date in the man pages' headers: fixed, so the pages
// are the same on every machine and day.
var docsDate = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func newDocsCmd() *cobra.Command {
	var rootDir string
	cmd := &cobra.Command{
		Use:    "docs",
		Short:  "Write the generated CLI reference (docs/cli, man pages, README flag table) under --root",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Defaults shown must not depend on the environment of whoever
			// generates: KEYSVC_* variables set flag defaults.
			for _, kv := range os.Environ() {
				if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "KEYSVC_") {
					os.Unsetenv(name)
				}
			}
			files, err := generateDocs()
			if err != nil {
				return err
			}
			readme, err := os.ReadFile(filepath.Join(rootDir, readmeFile))
			if err != nil {
				return err
			}
			newReadme, err := spliceReadme(readme, files[readmeFile])
			if err != nil {
				return err
			}
			for _, d := range []string{docsCLIDir, docsManDir} {
				if err := os.MkdirAll(filepath.Join(rootDir, d), 0o755); err != nil {
					return err
				}
				old, _ := filepath.Glob(filepath.Join(rootDir, d, "keysvc*"))
				for _, f := range old {
					if err := os.Remove(f); err != nil {
						return err
					}
				}
			}
			for name, b := range files {
				if name == readmeFile {
					continue
				}
				if err := os.WriteFile(filepath.Join(rootDir, name), b, 0o644); err != nil {
					return err
				}
			}
			if err := os.WriteFile(filepath.Join(rootDir, readmeFile), newReadme, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d files under %s and the flag table of %s\n", len(files)-1, filepath.Join(rootDir, docsCLIDir), filepath.Join(rootDir, readmeFile))
			return nil
		},
	}
	cmd.Flags().StringVar(&rootDir, "root", ".", "repository root")
	return cmd
}

// generateDocs returns the generated files by path from the repository
// root; README.md maps to the flag table alone (see spliceReadme).
func generateDocs() (map[string][]byte, error) {
	root := newRootCmd()
	root.DisableAutoGenTag = true
	normalizeDefaults(root)
	tmp, err := os.MkdirTemp("", "keysvc-docs-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	md, man := filepath.Join(tmp, "md"), filepath.Join(tmp, "man")
	for _, d := range []string{md, man} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return nil, err
		}
	}
	prepend := func(string) string { return "<!-- " + docsGeneratedNote + " -->\n\n" }
	if err := doc.GenMarkdownTreeCustom(root, md, prepend, func(s string) string { return s }); err != nil {
		return nil, err
	}
	hdr := &doc.GenManHeader{Title: "KEYSVC", Section: "1", Date: &docsDate, Source: "keysvc", Manual: "keysvc manual"}
	if err := doc.GenManTree(root, hdr, man); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for dir, into := range map[string]string{md: docsCLIDir, man: docsManDir} {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil, err
		}
		for _, e := range entries {
			b, err := os.ReadFile(filepath.Join(dir, e.Name()))
			if err != nil {
				return nil, err
			}
			out[into+"/"+e.Name()] = b
		}
	}
	serve, _, err := root.Find([]string{"serve"})
	if err != nil {
		return nil, err
	}
	out[readmeFile] = serveFlagTable(serve.Flags())
	return out, nil
}

// normalizeDefaults replaces defaults that depend on the machine (the
// user and host in an --actor default) with placeholders.
func normalizeDefaults(root *cobra.Command) {
	host, _ := os.Hostname()
	name := ""
	if u, err := user.Current(); err == nil {
		name = u.Username
	}
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if host != "" && strings.Contains(f.DefValue, host) {
				f.DefValue = strings.ReplaceAll(f.DefValue, host, "HOST")
			}
			if f.DefValue == defaultActor() {
				f.DefValue = "USER (keysvc awskms)"
			}
			if name != "" && strings.Contains(f.DefValue, name+"@") {
				f.DefValue = strings.ReplaceAll(f.DefValue, name+"@", "USER@")
			}
		})
		for _, s := range c.Commands() {
			walk(s)
		}
	}
	walk(root)
}

var envInUsage = regexp.MustCompile(`KEYSVC_[A-Z0-9_]+`)

// serveFlagTable is the README's table of keysvc serve's flags: each
// flag, the environment variables that set it (KEYSVC_ + the name in
// upper case, which applyConfig maps to every flag, and any other its
// usage names, such as KEYSVC_MIGRATE_ON_START), its default and usage.
func serveFlagTable(fs *pflag.FlagSet) []byte {
	var b bytes.Buffer
	b.WriteString("| flag | env | default | meaning |\n| --- | --- | --- | --- |\n")
	var rows []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Hidden || f.Name == "help" {
			return
		}
		envs := []string{"KEYSVC_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))}
		if f.Name == "config" {
			envs = nil // KEYSVC_CONFIG is read by the flag default, not the file
		}
		for _, e := range envInUsage.FindAllString(f.Usage, -1) {
			if !strings.Contains(strings.Join(envs, " "), e) && !strings.Contains(f.Usage, "$"+e) {
				envs = append(envs, e)
			}
		}
		def := f.DefValue
		switch {
		case def == "" || def == "[]":
			def = "empty"
		case f.Value.Type() == "bool" && def == "false":
			def = "off"
		default:
			def = "`" + def + "`"
		}
		envCol := ""
		for i, e := range envs {
			if i > 0 {
				envCol += ", "
			}
			envCol += "`" + e + "`"
		}
		// Markdown: a table cell must not end early (|), and <data-dir>
		// or KEYSVC_* must not turn into an HTML tag or emphasis.
		usage := strings.NewReplacer("|", `\|`, "<", "&lt;", ">", "&gt;", "*", `\*`, "\n", " ").Replace(f.Usage)
		rows = append(rows, fmt.Sprintf("| `--%s` | %s | %s | %s |", f.Name, envCol, def, usage))
	})
	sort.Strings(rows)
	b.WriteString(strings.Join(rows, "\n"))
	b.WriteString("\n")
	return b.Bytes()
}

// spliceReadme replaces the README's generated flag table (between
// readmeTableBegin and readmeTableEnd) with table.
func spliceReadme(readme, table []byte) ([]byte, error) {
	s := string(readme)
	i := strings.Index(s, readmeTableBegin)
	j := strings.Index(s, readmeTableEnd)
	if i < 0 || j < i {
		return nil, fmt.Errorf("%s has no %q ... %q block", readmeFile, readmeTableBegin, readmeTableEnd)
	}
	return []byte(s[:i+len(readmeTableBegin)] + "\n" + string(table) + s[j:]), nil
}

// readmeTable returns the README's generated flag table as committed.
func readmeTable(readme []byte) ([]byte, error) {
	s := string(readme)
	i := strings.Index(s, readmeTableBegin)
	j := strings.Index(s, readmeTableEnd)
	if i < 0 || j < i {
		return nil, fmt.Errorf("%s has no %q ... %q block", readmeFile, readmeTableBegin, readmeTableEnd)
	}
	return []byte(strings.TrimPrefix(s[i+len(readmeTableBegin):j], "\n")), nil
}
