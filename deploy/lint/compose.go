package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
)

// lintCompose loads the files the way `docker compose -f A -f B config`
// does (Compose Specification schema, merge, interpolation, reference
// checks) with compose-go, then checks what the schema cannot: build
// contexts, Dockerfiles and targets exist, keysvc containers are hardened,
// and keysvc command lines use real subcommands and flags.
func lintCompose(p *problems, files []string) {
	label := strings.Join(files, " + ")
	abs := make([]string, len(files))
	for i, f := range files {
		a, err := filepath.Abs(f)
		if err != nil {
			p.add(label, "%v", err)
			return
		}
		abs[i] = a
	}
	// An empty environment: the files must not depend on the caller's.
	opts, err := cli.NewProjectOptions(abs,
		cli.WithWorkingDirectory(filepath.Dir(abs[0])),
		cli.WithEnv([]string{}),
		cli.WithInterpolation(true),
		cli.WithResolvedPaths(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		p.add(label, "%v", err)
		return
	}
	proj, err := opts.LoadProject(context.Background())
	if err != nil {
		p.add(label, "%v", err)
		return
	}
	help := helpFromEnv()
	for _, name := range proj.ServiceNames() {
		s := proj.Services[name]
		where := label + ": service " + name
		if s.Build != nil {
			lintComposeBuild(p, where, s.Build)
		}
		if !strings.Contains(s.Image, "keysvc") {
			continue
		}
		if s.User != "65532:65532" && s.User != "65532" {
			p.add(where, "user must be 65532 (the image's non-root user), got %q", s.User)
		}
		if !s.ReadOnly {
			p.add(where, "set read_only: true")
		}
		if !slices.Contains(s.CapDrop, "ALL") {
			p.add(where, "set cap_drop: [ALL]")
		}
		if !slices.Contains(s.SecurityOpt, "no-new-privileges:true") {
			p.add(where, `set security_opt: ["no-new-privileges:true"]`)
		}
		for _, sec := range s.Secrets {
			if _, ok := proj.Secrets[sec.Source]; !ok {
				p.add(where, "secret %s is not defined", sec.Source)
			}
		}
		if help != nil && len(s.Entrypoint) == 0 && len(s.Command) > 0 {
			help.checkArgs(p, where, []string(s.Command), true)
		}
	}
	for name, sec := range proj.Secrets {
		if sec.File == "" && sec.Environment == "" && !sec.External {
			p.add(label, "secret %s has no source", name)
		}
	}
}

func lintComposeBuild(p *problems, where string, b *types.BuildConfig) {
	st, err := os.Stat(b.Context)
	if err != nil || !st.IsDir() {
		p.add(where, "build context %s is not a directory", b.Context)
		return
	}
	df := b.Dockerfile
	if !filepath.IsAbs(df) {
		df = filepath.Join(b.Context, df)
	}
	stages, err := dockerfileStages(df)
	if err != nil {
		p.add(where, "dockerfile %s: %v", df, err)
		return
	}
	if b.Target != "" && !slices.Contains(stages, b.Target) {
		p.add(where, "build target %q is not a stage of %s (stages: %s)", b.Target, df, strings.Join(stages, ", "))
	}
}
