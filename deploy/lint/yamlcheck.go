package main

import (
	"bytes"
	"errors"
	"io"
	"os"

	goyaml "go.yaml.in/yaml/v2"
)

// lintYAML parses every document of each file strictly: syntax errors and
// duplicate keys are problems.
func lintYAML(p *problems, files []string) {
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			p.add(f, "%v", err)
			continue
		}
		dec := goyaml.NewDecoder(bytes.NewReader(raw))
		dec.SetStrict(true)
		for i := 0; ; i++ {
			var doc any
			err := dec.Decode(&doc)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				p.add(f, "document %d: %v", i, err)
				break
			}
		}
	}
}
