// Command keysvc-k8s130-lint validates Kubernetes manifests against the
// API of Kubernetes 1.30: every document is decoded strictly into the
// k8s.io/api v0.30 types of the API versions 1.30 serves (unknown or
// duplicate fields, wrong types and removed apiVersions fail), then checked
// across objects (selectors, named ports, volumes, references) and against
// the restricted Pod Security Standard.
//
// It is its own module so that k8s.io/api stays at v0.30: the other deploy
// checks (deploy/lint) depend on BuildKit, whose dependencies require a
// newer k8s.io/api. deploy/lint.sh builds and runs it.
//
// Usage: keysvc-k8s130-lint DIR
package main

import (
	"fmt"
	"os"
	"sort"
)

type problems struct{ list []string }

func (p *problems) add(file, format string, args ...any) {
	p.list = append(p.list, file+": "+fmt.Sprintf(format, args...))
}

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: keysvc-k8s130-lint DIR")
		os.Exit(2)
	}
	p := &problems{}
	lintK8s(p, os.Args[1])
	if len(p.list) == 0 {
		return
	}
	sort.Strings(p.list)
	for _, l := range p.list {
		fmt.Fprintln(os.Stderr, l)
	}
	os.Exit(1)
}
