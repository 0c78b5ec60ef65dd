// Command keysvc-deploy-lint validates keysvc's deployment files offline:
// compose files (the Compose Specification loader that docker compose
// uses), the Dockerfile (BuildKit's parser and its `docker build --check`
// rules), the Grafana dashboard, the metrics of a live keysvc, and every
// keysvc command line, flag and KEYSVC_* variable written in deploy/ and the
// runbooks (and in the Kubernetes containers' args) against the real
// binary's --help. The Kubernetes schema checks are in k8s130/, a module of
// its own that keeps k8s.io/api at v0.30 (BuildKit's dependencies here
// require a newer one).
//
// It is a separate module so that its dependencies never enter keysvc's
// go.mod. deploy/lint.sh builds and runs it.
//
// Usage:
//
//	keysvc-deploy-lint k8s-args DIR                     (keysvc containers' args against --help)
//	keysvc-deploy-lint compose FILE [FILE...]           (files merged in order, like docker compose -f)
//	keysvc-deploy-lint dockerfile FILE
//	keysvc-deploy-lint grafana FILE RULES_OUT           (writes its PromQL as recording rules for promtool)
//	keysvc-deploy-lint cli KEYSVC_BIN REPO FILE...      (keysvc commands, flags and KEYSVC_* variables)
//	keysvc-deploy-lint yaml FILE...                     (strict YAML: syntax, duplicate keys)
//	keysvc-deploy-lint metrics BASE_URL                 (a live keysvc exports the planned metrics)
//
// Every problem is printed as "FILE: message"; the exit status is 1 if there
// was any, 2 on a usage error.
package main

import (
	"fmt"
	"os"
	"sort"
)

// problems collects findings; each is printed once, sorted.
type problems struct{ list []string }

func (p *problems) add(file, format string, args ...any) {
	p.list = append(p.list, file+": "+fmt.Sprintf(format, args...))
}

func (p *problems) exit() {
	if len(p.list) == 0 {
		os.Exit(0)
	}
	sort.Strings(p.list)
	prev := ""
	for _, l := range p.list {
		if l != prev {
			fmt.Fprintln(os.Stderr, l)
		}
		prev = l
	}
	os.Exit(1)
}

func usage() {
	fmt.Fprintln(os.Stderr, `usage:
  keysvc-deploy-lint k8s-args DIR
  keysvc-deploy-lint compose FILE [FILE...]
  keysvc-deploy-lint dockerfile FILE
  keysvc-deploy-lint grafana FILE RULES_OUT
  keysvc-deploy-lint cli KEYSVC_BIN REPO FILE...
  keysvc-deploy-lint yaml FILE...
  keysvc-deploy-lint metrics BASE_URL`)
	os.Exit(2)
}

func main() {
	if len(os.Args) < 3 {
		usage()
	}
	p := &problems{}
	args := os.Args[2:]
	switch os.Args[1] {
	case "k8s-args":
		if len(args) != 1 {
			usage()
		}
		lintK8sArgs(p, args[0])
	case "compose":
		lintCompose(p, args)
	case "dockerfile":
		if len(args) != 1 {
			usage()
		}
		lintDockerfile(p, args[0])
	case "grafana":
		if len(args) != 2 {
			usage()
		}
		lintGrafana(p, args[0], args[1])
	case "metrics":
		if len(args) != 1 {
			usage()
		}
		lintMetrics(p, args[0])
	case "yaml":
		lintYAML(p, args)
	case "cli":
		if len(args) < 3 {
			usage()
		}
		lintCLI(p, args[0], args[1], args[2:])
	default:
		usage()
	}
	p.exit()
}
