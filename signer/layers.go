package signer

import (
	"bytes"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/keysvc/keysvc/internal/strictjson"
)

// Layer separation (ADR 0013). Every layer that keysvc signs on its own
// authority has a protected-header typ (RFC 7515 §4.1.9) that names it, and
// only the endpoint of that layer signs under it: a JWS cannot be
// presented as another layer's by a verifier that checks typ.
const (
	// TransportJWSTyp is the typ of every VRP MCP transport assertion JWS
	// (POST /v1/keys/{name}/mcp-transport): the media type
	// application/vrp-mcp-transport+jws, written without "application/"
	// as RFC 7515 §4.1.9 recommends.
	TransportJWSTyp = "vrp-mcp-transport+jws"
	// LegacyTransportJWSTyp is what transport JWS carried before ADR 0013
	// ("JWT", as in the public VRP receipt vectors). keysvc no longer
	// signs transport assertions under it; receipts made before still
	// verify, since a verifier checks typ only when asked to.
	LegacyTransportJWSTyp = "JWT"
	// TransportTypePrefix starts the "type" member of every VRP MCP
	// transport assertion ("vrp.mcp.transport.1").
	TransportTypePrefix = "vrp.mcp."
)

// NormalizeTyp returns typ as the media type it names, for comparison: lower
// case (media types are case-insensitive, RFC 2045 §5.1), with
// "application/" prepended when typ holds no '/' (RFC 7515 §4.1.9). So
// "vrp-mcp-transport+jws" and "application/VRP-MCP-Transport+JWS" are equal.
func NormalizeTyp(typ string) string {
	t := strings.ToLower(strings.TrimSpace(typ))
	if t != "" && !strings.Contains(t, "/") {
		t = "application/" + t
	}
	return t
}

// ReservedTypLayer returns the layer whose endpoint alone signs under typ
// (LayerTransport for TransportJWSTyp in any spelling), or "" when typ is
// free for POST /v1/keys/{name}/sign.
func ReservedTypLayer(typ string) string {
	if typ != "" && NormalizeTyp(typ) == NormalizeTyp(TransportJWSTyp) {
		return LayerTransport
	}
	return ""
}

// ClaimedLayer returns the layer a JSON object payload claims to be, or ""
// when it claims none: LayerTransport when a top-level member
// "vrp_mcp_profile_version" is present, or a top-level "type" is a string
// starting with TransportTypePrefix in any case (a VRP MCP transport
// assertion, profile 1.0 or later). Only the top-level member names are
// read; values are skipped without being decoded. obj must be RFC 8785
// bytes (the signing path passes them): names and strings are then written
// without escapes for printable characters, so they are compared as raw
// bytes, and a decoder from strictjson's pool does not allocate per call.
// Anything that is not such an object claims no layer.
func ClaimedLayer(obj []byte) string {
	// RFC 8785 writes these names without escapes, so bytes that hold
	// neither anywhere have no such member at any level (issue 18: the
	// decoder below was 3 % of a batch signature's CPU).
	if !bytes.Contains(obj, []byte(`"type"`)) && !bytes.Contains(obj, []byte(`"vrp_mcp_profile_version"`)) {
		return ""
	}
	layer := ""
	_ = strictjson.WithDecoder(obj, func(dec *jsontext.Decoder) error {
		if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
			return nil
		}
		for dec.PeekKind() == '"' {
			name, err := dec.ReadValue()
			if err != nil {
				return nil
			}
			switch string(name) {
			case `"vrp_mcp_profile_version"`:
				layer = LayerTransport
				return nil
			case `"type"`:
				v, err := dec.ReadValue()
				if err != nil {
					return nil
				}
				if v.Kind() == '"' && len(v) > len(TransportTypePrefix) && strings.EqualFold(string(v[1:1+len(TransportTypePrefix)]), TransportTypePrefix) {
					layer = LayerTransport
					return nil
				}
				continue
			}
			if err := dec.SkipValue(); err != nil {
				return nil
			}
		}
		return nil
	})
	return layer
}
