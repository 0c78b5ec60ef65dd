package main

import (
	"bufio"
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// cmdHelp is what `keysvc PATH --help` says: subcommands and flags
// (inherited global flags included).
type cmdHelp struct {
	subs  map[string]bool
	flags map[string]bool
}

// helpCache runs the real keysvc binary's --help once per command path.
type helpCache struct {
	bin string
	m   map[string]*cmdHelp
}

var flagRE = regexp.MustCompile(`^\s+(?:-[A-Za-z], )?--([a-z0-9][a-z0-9-]*)`)

// helpFromEnv returns a cache for $KEYSVC_LINT_BIN (set by deploy/lint.sh
// to a freshly built keysvc), or nil when unset.
func helpFromEnv() *helpCache {
	bin := os.Getenv("KEYSVC_LINT_BIN")
	if bin == "" {
		return nil
	}
	return &helpCache{bin: bin, m: map[string]*cmdHelp{}}
}

func (h *helpCache) get(path []string) (*cmdHelp, error) {
	key := strings.Join(path, " ")
	if c, ok := h.m[key]; ok {
		return c, nil
	}
	cmd := exec.Command(h.bin, append(append([]string{}, path...), "--help")...)
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=/nonexistent"} // no KEYSVC_* from the caller
	out, err := cmd.Output()
	if err != nil {
		return nil, err
	}
	c := &cmdHelp{subs: map[string]bool{}, flags: map[string]bool{"help": true}}
	section := ""
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasSuffix(line, ":") && !strings.HasPrefix(line, " "):
			section = line
			continue
		case strings.TrimSpace(line) == "":
			continue
		}
		switch section {
		case "Available Commands:":
			if f := strings.Fields(line); len(f) > 0 {
				c.subs[f[0]] = true
			}
		case "Flags:", "Global Flags:":
			if m := flagRE.FindStringSubmatch(line); m != nil {
				c.flags[m[1]] = true
			}
		}
	}
	h.m[key] = c
	return c, nil
}

// checkArgs checks one keysvc command line (the words after "keysvc"):
// the subcommand path must exist and every --flag must be one of its flags.
// With requireCommand, a first word that is no subcommand is a problem;
// otherwise such a line is taken for prose and skipped.
func (h *helpCache) checkArgs(p *problems, where string, args []string, requireCommand bool) {
	root, err := h.get(nil)
	if err != nil {
		p.add(where, "running %s --help: %v", h.bin, err)
		return
	}
	if len(args) == 0 {
		return
	}
	cur, path := root, []string(nil)
	for _, a := range args {
		if !cur.subs[a] {
			break
		}
		path = append(path, a)
		if cur, err = h.get(path); err != nil {
			p.add(where, "keysvc %s --help: %v", strings.Join(path, " "), err)
			return
		}
	}
	if len(path) == 0 {
		if requireCommand {
			p.add(where, "keysvc %s: no such command", args[0])
		}
		return
	}
	for _, a := range args[len(path):] {
		a = strings.Trim(a, "[](){}|,.")
		if !strings.HasPrefix(a, "--") {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if name == "" {
			continue
		}
		if !cur.flags[name] {
			p.add(where, "keysvc %s: no flag --%s", strings.Join(path, " "), name)
		}
	}
}

var (
	keysvcRE  = regexp.MustCompile(`(?:^|[\s=/'"(])keysvc\s+(\S.*)$`)
	envNameRE = regexp.MustCompile(`KEYSVC_[A-Z0-9_]*[A-Z0-9]`)
	literalRE = regexp.MustCompile(`"(KEYSVC_[A-Z0-9_]*[A-Z0-9])"`)
	codeRE    = regexp.MustCompile("`([^`]+)`")
	leadRE    = regexp.MustCompile(`^(?:[#$>]+\s*|sudo\s+|[A-Z_][A-Z0-9_]*=\S*\s+)*`)
)

// lintCLI checks, in every file: each keysvc command line (subcommands and
// flags against the binary's --help), each KEYSVC_* variable (against the
// names the Go sources of the repository read), and each keysvc_* metric
// name (against the planned metrics).
func lintCLI(p *problems, bin, repo string, files []string) {
	h := &helpCache{bin: bin, m: map[string]*cmdHelp{}}
	known := knownEnv(p, repo, h)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			p.add(f, "%v", err)
			continue
		}
		md := strings.HasSuffix(f, ".md")
		inCode := false
		var logical strings.Builder
		lineNo, start := 0, 0
		for _, line := range strings.Split(string(raw), "\n") {
			lineNo++
			if md && strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode = !inCode
				continue
			}
			if logical.Len() == 0 {
				start = lineNo
			}
			if strings.HasSuffix(line, `\`) {
				logical.WriteString(strings.TrimSuffix(line, `\`) + " ")
				continue
			}
			logical.WriteString(line)
			text := logical.String()
			logical.Reset()
			where := f + ":" + strconv.Itoa(start)
			for _, name := range envNameRE.FindAllStringIndex(text, -1) {
				n := text[name[0]:name[1]]
				if after := text[name[1]:]; strings.HasPrefix(after, "*") || strings.HasPrefix(after, "_*") {
					continue // a family, e.g. KEYSVC_PKCS11_*
				}
				if !known[n] {
					p.add(where, "%s is read nowhere in keysvc's Go sources", n)
				}
			}
			for _, m := range metricRE.FindAllString(text, -1) {
				if !plannedMetrics[m] && !plannedMetricFamilies[m] && tlogOperatorTypes[m] == "" && tlogClientTypes[m] == "" && !strings.HasPrefix(m, "keysvc_version_") {
					p.add(where, "%s is not one of keysvc's planned metrics", m)
				}
			}
			switch {
			case md && inCode:
				checkCommandLine(p, h, where, text, true)
			case md:
				for _, span := range codeRE.FindAllStringSubmatch(text, -1) {
					checkCommandLine(p, h, where, span[1], false)
				}
			default:
				checkCommandLine(p, h, where, text, false)
			}
		}
	}
}

// checkCommandLine finds "keysvc WORDS" in a line and checks the words.
// In code blocks a line that starts with keysvc must name a real command.
func checkCommandLine(p *problems, h *helpCache, where, text string, codeBlock bool) {
	rest := text
	for {
		loc := keysvcRE.FindStringSubmatchIndex(rest)
		if loc == nil {
			return
		}
		before := rest[:loc[2]]
		args := rest[loc[2]:loc[3]]
		// One command: stop at pipes, lists, comments and substitutions.
		for _, stop := range []string{" #", "|", ";", "&&", "`", "$(", ")"} {
			if i := strings.Index(args, stop); i >= 0 {
				args = args[:i]
			}
		}
		words := shellWords(args)
		first := strings.TrimSpace(leadRE.ReplaceAllString(strings.TrimSpace(before), "")) == "keysvc"
		if len(words) > 0 && !strings.HasPrefix(words[0], "-") && !strings.Contains(words[0], "/") {
			h.checkArgs(p, where, words, codeBlock && first && regexp.MustCompile(`^[a-z][a-z-]*$`).MatchString(words[0]))
		}
		rest = rest[loc[2]:]
	}
}

// shellWords splits a command line on blanks, keeping quoted strings whole.
func shellWords(s string) []string {
	var out []string
	var cur strings.Builder
	var quote rune
	has := false
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, has = r, true
		case r == ' ' || r == '\t':
			if has || cur.Len() > 0 {
				out = append(out, cur.String())
				cur.Reset()
				has = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if has || cur.Len() > 0 {
		out = append(out, cur.String())
	}
	return out
}

// knownEnv returns the KEYSVC_* names keysvc reads: string literals in the
// repository's Go sources (deploy/ excluded) and, when serve takes a
// configuration file (koanf maps KEYSVC_<FLAG> to every flag), one per
// serve flag.
func knownEnv(p *problems, repo string, h *helpCache) map[string]bool {
	// deploy/lint.sh's own settings.
	known := map[string]bool{"KEYSVC_LINT_BIN": true, "KEYSVC_LINT_CACHE": true}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "deploy" || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		raw, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range literalRE.FindAllStringSubmatch(string(raw), -1) {
			known[m[1]] = true
		}
		return nil
	})
	if err != nil {
		p.add(repo, "%v", err)
	}
	if serve, err := h.get([]string{"serve"}); err == nil && serve.flags["config"] {
		for f := range serve.flags {
			known["KEYSVC_"+strings.ToUpper(strings.ReplaceAll(f, "-", "_"))] = true
		}
	}
	return known
}
