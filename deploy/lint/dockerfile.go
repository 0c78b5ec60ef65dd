package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	digest "github.com/opencontainers/go-digest"
)

// offlineResolver answers BuildKit's base-image lookups with a minimal
// linux/amd64 image config, so linting needs no registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg, _ := json.Marshal(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{}},
	})
	return ref, digest.FromBytes(cfg), cfg, nil
}

// lintDockerfile runs BuildKit's Dockerfile checks (what `docker build
// --check` reports: every rule, every stage), treating any warning as a
// problem, then keysvc's own rules for the runtime image.
func lintDockerfile(p *problems, file string) {
	dt, err := os.ReadFile(file)
	if err != nil {
		p.add(file, "%v", err)
		return
	}
	ctx := context.Background()
	src := llb.Local("dockerfile")
	def, err := src.Marshal(ctx)
	if err != nil {
		p.add(file, "%v", err)
		return
	}
	smap := llb.NewSourceMap(&src, file, "Dockerfile", dt)
	smap.Definition = def
	res, err := dockerfile2llb.DockerfileLint(ctx, dt, dockerfile2llb.ConvertOpt{
		MetaResolver: offlineResolver{},
		SourceMap:    smap,
	})
	if err != nil {
		p.add(file, "buildkit lint: %v", err)
		return
	}
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		p.add(file, "line %d: %s: %s (%s)", line, w.RuleName, w.Detail, w.URL)
	}
	if res.Error != nil {
		p.add(file, "build error: %s", res.Error.Message)
	}

	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		p.add(file, "%v", err)
		return
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		p.add(file, "%v", err)
		return
	}
	if len(stages) == 0 {
		p.add(file, "no stages")
		return
	}
	names := map[string]bool{}
	for _, s := range stages {
		if s.Name != "" {
			names[s.Name] = true
		}
	}
	for _, s := range stages {
		base := s.BaseName
		if !names[base] && base != "scratch" {
			img := base[strings.LastIndex(base, "/")+1:]
			if !strings.Contains(img, ":") && !strings.Contains(img, "@") || strings.HasSuffix(img, ":latest") {
				p.add(file, "stage %s: base image %s is not pinned to a tag or digest", s.Name, base)
			}
		}
		for _, c := range s.Commands {
			if a, ok := c.(*instructions.AddCommand); ok {
				for _, src := range a.SourcePaths {
					if strings.Contains(src, "://") {
						p.add(file, "stage %s: ADD of a URL (%s); download in a RUN with a checksum instead", s.Name, src)
					}
				}
			}
		}
	}
	final := stages[len(stages)-1]
	var user string
	var entrypoint []string
	var exposed []string
	for _, c := range final.Commands {
		switch x := c.(type) {
		case *instructions.UserCommand:
			user = x.User
		case *instructions.EntrypointCommand:
			if !x.PrependShell {
				entrypoint = x.CmdLine
			} else {
				p.add(file, "final stage: ENTRYPOINT must use the exec (JSON) form")
			}
		}
	}
	// EXPOSE and USER are inherited from the base stage.
	for s := stageByName(stages, final.BaseName); s != nil; s = stageByName(stages, s.BaseName) {
		for _, c := range s.Commands {
			switch x := c.(type) {
			case *instructions.ExposeCommand:
				exposed = append(exposed, x.Ports...)
			case *instructions.UserCommand:
				if user == "" {
					user = x.User
				}
			}
		}
	}
	for _, c := range final.Commands {
		if x, ok := c.(*instructions.ExposeCommand); ok {
			exposed = append(exposed, x.Ports...)
		}
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		p.add(file, "final stage: USER must be a numeric non-root UID (Kubernetes runAsNonRoot checks it), got %q", user)
	}
	if !slices.Equal(entrypoint, []string{"keysvc"}) {
		p.add(file, `final stage: ENTRYPOINT must be ["keysvc"], got %q`, entrypoint)
	}
	for _, port := range []string{"8080", "8443", "9443"} {
		if !slices.Contains(exposed, port) {
			p.add(file, "final stage: EXPOSE %s is missing", port)
		}
	}
	if !regexp.MustCompile(`CGO_ENABLED=1 go build -trimpath`).Match(dt) {
		p.add(file, "the build stage must build with CGO_ENABLED=1 go build -trimpath (the PKCS#11 backend is cgo)")
	}
}

func stageByName(stages []instructions.Stage, name string) *instructions.Stage {
	for i := range stages {
		if stages[i].Name == name {
			return &stages[i]
		}
	}
	return nil
}

// dockerfileStages lists the named stages of a Dockerfile.
func dockerfileStages(file string) ([]string, error) {
	dt, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	ast, err := parser.Parse(bytes.NewReader(dt))
	if err != nil {
		return nil, err
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, s := range stages {
		if s.Name != "" {
			out = append(out, s.Name)
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no named stages")
	}
	return out, nil
}
