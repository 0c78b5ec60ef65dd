package main

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	goyaml "go.yaml.in/yaml/v2"
)

// lintK8sArgs checks the args of every keysvc container in the manifests
// of dir (image naming keysvc, no command: the image's ENTRYPOINT
// ["keysvc"] runs with the args) against the binary's --help. The schema
// and cross-object checks are keysvc-k8s130-lint's (deploy/lint/k8s130).
func lintK8sArgs(p *problems, dir string) {
	help := helpFromEnv()
	if help == nil {
		p.add(dir, "KEYSVC_LINT_BIN is not set")
		return
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	sort.Strings(files)
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			p.add(f, "%v", err)
			continue
		}
		dec := goyaml.NewDecoder(bytes.NewReader(raw))
		for i := 0; ; i++ {
			var doc struct {
				Kind string `yaml:"kind"`
				Spec struct {
					Containers []k8sContainer `yaml:"containers"`
					Template   struct {
						Spec struct {
							Containers []k8sContainer `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := dec.Decode(&doc); err != nil {
				break // syntax errors are reported by the yaml and k8s checks
			}
			containers := doc.Spec.Template.Spec.Containers
			if doc.Kind == "Pod" {
				containers = doc.Spec.Containers
			}
			for _, c := range containers {
				if strings.Contains(c.Image, "keysvc") && len(c.Command) == 0 {
					help.checkArgs(p, f+"#"+strconv.Itoa(i)+": "+doc.Kind+" container "+c.Name, c.Args, true)
				}
			}
		}
	}
}

type k8sContainer struct {
	Name    string   `yaml:"name"`
	Image   string   `yaml:"image"`
	Command []string `yaml:"command"`
	Args    []string `yaml:"args"`
}
