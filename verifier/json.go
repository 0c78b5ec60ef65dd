package verifier

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// MaxJSONDepth bounds the nesting of arrays and objects in any JSON this
// package decodes (receipt, JWS header and payload, JWK).
const MaxJSONDepth = 64

// errJSON reports JSON that this package refuses to interpret.
var errJSON = errors.New("unacceptable JSON")

// decodeStrict decodes exactly one JSON value from data into the generic
// model (map[string]any, []any, string, json.Number, bool, nil). It refuses
// invalid UTF-8, syntax errors, trailing data, nesting deeper than
// MaxJSONDepth and — at any depth — an object with two members of the same
// (unescaped) name.
func decodeStrict(data []byte) (any, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: invalid UTF-8", errJSON)
	}
	if !json.Valid(data) {
		return nil, fmt.Errorf("%w: syntax error", errJSON)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: trailing data", errJSON)
	}
	return v, nil
}

// decodeStrictObject is decodeStrict for a value that must be an object.
func decodeStrictObject(data []byte) (map[string]any, error) {
	v, err := decodeStrict(data)
	if err != nil {
		return nil, err
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("%w: not an object", errJSON)
	}
	return m, nil
}

// readValue reads one value whose first token is next in dec. depth is the
// number of arrays and objects already open around it.
func readValue(dec *json.Decoder, depth int) (any, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errJSON, err)
	}
	d, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	if depth >= MaxJSONDepth {
		return nil, fmt.Errorf("%w: nested deeper than %d", errJSON, MaxJSONDepth)
	}
	switch d {
	case '{':
		m := map[string]any{}
		for dec.More() {
			kt, err := dec.Token()
			if err != nil {
				return nil, fmt.Errorf("%w: %v", errJSON, err)
			}
			k, ok := kt.(string)
			if !ok {
				return nil, fmt.Errorf("%w: object key is not a string", errJSON)
			}
			if _, dup := m[k]; dup {
				return nil, fmt.Errorf("%w: duplicate member %q", errJSON, k)
			}
			v, err := readValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			m[k] = v
		}
		if _, err := dec.Token(); err != nil { // '}'
			return nil, fmt.Errorf("%w: %v", errJSON, err)
		}
		return m, nil
	case '[':
		a := []any{}
		for dec.More() {
			v, err := readValue(dec, depth+1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		if _, err := dec.Token(); err != nil { // ']'
			return nil, fmt.Errorf("%w: %v", errJSON, err)
		}
		return a, nil
	default:
		return nil, fmt.Errorf("%w: unexpected %q", errJSON, d)
	}
}
