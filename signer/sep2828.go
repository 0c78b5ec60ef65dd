package signer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// SEP2828Projection is the SEP-2828 fallback projection of an MCP tools/call
// request (modelcontextprotocol#2828, fallback_projection_v0): the tool
// name, its arguments and, when present, _meta.authorization_binding as
// authBinding. Every other _meta member (progress tokens, trace ids) is a
// transport artifact and is left out.
type SEP2828Projection struct {
	Arguments   json.RawMessage `json:"arguments"`
	AuthBinding json.RawMessage `json:"authBinding,omitempty"`
	ToolName    string          `json:"toolName"`
}

// ProjectSEP2828 projects tools/call params ({"name", "arguments", "_meta"?,
// ...}) and returns the projection's RFC 8785 bytes and its digest
// "sha256:<hex>". Errors: params that are not strict I-JSON
// (*strictjson.Error), a missing or non-string name, missing arguments.
func ProjectSEP2828(params []byte) (canonical []byte, digest string, err error) {
	if err := strictjson.Check(params, argumentLimits); err != nil {
		return nil, "", err
	}
	var p struct {
		Name      *string                    `json:"name"`
		Arguments json.RawMessage            `json:"arguments"`
		Meta      map[string]json.RawMessage `json:"_meta"`
	}
	if err := json.Unmarshal(params, &p); err != nil {
		return nil, "", fmt.Errorf("signer: SEP-2828 params: %w", err)
	}
	if p.Name == nil {
		return nil, "", errors.New("signer: SEP-2828 params: name is required")
	}
	if len(p.Arguments) == 0 {
		return nil, "", errors.New("signer: SEP-2828 params: arguments is required")
	}
	proj := SEP2828Projection{Arguments: p.Arguments, ToolName: *p.Name}
	if ab, ok := p.Meta["authorization_binding"]; ok {
		proj.AuthBinding = ab
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(proj); err != nil {
		return nil, "", fmt.Errorf("signer: SEP-2828 projection: %w", err)
	}
	canonical, err = canonicalize(bytes.TrimSpace(buf.Bytes()), argumentLimits)
	if err != nil {
		return nil, "", err
	}
	return canonical, DigestSHA256(canonical), nil
}
