package verifier

import "strings"

// TransportTyp is the JWS typ keysvc gives every VRP MCP transport
// assertion (ADR 0013): the media type application/vrp-mcp-transport+jws.
const TransportTyp = "vrp-mcp-transport+jws"

// KeysvcLayerTyps returns the layer typs keysvc signs under (ADR 0013), for
// Options.LayerTyps: layer "transport" → TransportTyp. A fresh map each
// call; the caller may add layers (an offer typ a node uses, say).
func KeysvcLayerTyps() map[string]string {
	return map[string]string{"transport": TransportTyp}
}

// normalizeTyp is typ as the media type it names: lower case, with
// "application/" prepended when it holds no '/' (RFC 7515 §4.1.9; media
// types are case-insensitive, RFC 2045 §5.1).
func normalizeTyp(typ string) string {
	t := strings.ToLower(strings.TrimSpace(typ))
	if t != "" && !strings.Contains(t, "/") {
		t = "application/" + t
	}
	return t
}

// layerTyps is Options.LayerTyps normalized: layer → media type, and the
// reverse, media type → layer.
type layerTyps struct {
	want  map[string]string
	owner map[string]string
}

func newLayerTyps(m map[string]string) *layerTyps {
	if len(m) == 0 {
		return nil
	}
	lt := &layerTyps{want: map[string]string{}, owner: map[string]string{}}
	for layer, typ := range m {
		n := normalizeTyp(typ)
		lt.want[layer] = n
		lt.owner[n] = layer
	}
	return lt
}

// fits reports whether a JWS with header typ may stand for layer: a layer
// with a typ of its own needs exactly that typ; any other layer must not
// carry a typ that belongs to another layer (a transport JWS presented as
// an offer). An absent or non-string typ is "".
func (lt *layerTyps) fits(layer string, header map[string]any) bool {
	typ, _ := header["typ"].(string)
	if _, present := header["typ"]; present {
		if _, isString := header["typ"].(string); !isString {
			return false
		}
	}
	n := normalizeTyp(typ)
	if want, ok := lt.want[layer]; ok {
		return n == want
	}
	owner, taken := lt.owner[n]
	return !taken || owner == layer
}
