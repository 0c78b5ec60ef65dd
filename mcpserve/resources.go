package mcpserve

import (
	"context"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/jwksserve"
	"github.com/keysvc/keysvc/rotation"
)

// Resource URIs: keysvc's public documents under the paths the public
// listener serves them at, in the keysvc: scheme. Only already-public
// documents are resources; nothing private ever is.
const (
	ResourceJWKS    = "keysvc:///.well-known/jwks.json"            // the default key's issuer's JWKS
	ResourceHistory = "keysvc:///.well-known/vrp-key-history.json" // the default key's issuer's key history
	ResourceDID     = "keysvc:///.well-known/did.json"             // did:web document of the default key's issuer
	TemplateJWKS    = "keysvc:///v1/keys/{name}/jwks.json"         // a key's JWKS
	TemplateHistory = "keysvc:///v1/keys/{name}/history.json"      // a key's key history
	keyPrefix       = "keysvc:///v1/keys/"                         // of the templates
	mimeJSON        = "application/json"                           // as served over HTTP
	mimeJWKS        = "application/jwk-set+json"                   // RFC 7517 §8.5
	mimeDID         = "application/did+ld+json"                    // W3C DID Core §6.3
)

func addResources(srv *mcp.Server, d *docs) {
	defaultDoc := func(pick func(ring *rotation.Keyring, e *rotation.KeyEntry) (jwksserve.Document, bool)) mcp.ResourceHandler {
		return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			ring := d.keyring()
			e, ok := ring.Keys[ring.Default]
			if !ok {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			doc, ok := pick(ring, e)
			if !ok {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return contents(req.Params.URI, mimeOf(req.Params.URI), doc), nil
		}
	}
	srv.AddResource(&mcp.Resource{URI: ResourceJWKS, Name: "jwks", Title: "JWKS of the default key's issuer", MIMEType: mimeJWKS,
		Description: "The JWK Set of every key of the default key's issuer (GET /.well-known/jwks.json): published versions with their VRP lifecycle members; revoked versions are left out."},
		defaultDoc(func(ring *rotation.Keyring, e *rotation.KeyEntry) (jwksserve.Document, bool) {
			doc, ok := ring.IssuerJWKS[e.Key.Issuer]
			return doc, ok
		}))
	srv.AddResource(&mcp.Resource{URI: ResourceHistory, Name: "key-history", Title: "Key history of the default key's issuer", MIMEType: mimeJSON,
		Description: "The key-history document of every key of the default key's issuer (GET /.well-known/vrp-key-history.json): every version ever made; revoked ones under vrp_revoked_keys."},
		defaultDoc(func(ring *rotation.Keyring, e *rotation.KeyEntry) (jwksserve.Document, bool) {
			doc, ok := ring.IssuerHistory[e.Key.Issuer]
			return doc, ok
		}))
	srv.AddResource(&mcp.Resource{URI: ResourceDID, Name: "did", Title: "did:web document", MIMEType: mimeDID,
		Description: "The did:web document of the default key's issuer (GET /.well-known/did.json)."},
		defaultDoc(func(ring *rotation.Keyring, e *rotation.KeyEntry) (jwksserve.Document, bool) {
			doc, ok := ring.DID[e.Key.Issuer]
			return doc, ok
		}))
	keyDoc := func(suffix string, pick func(e *rotation.KeyEntry) jwksserve.Document) mcp.ResourceHandler {
		return func(_ context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
			name, ok := strings.CutPrefix(req.Params.URI, keyPrefix)
			if ok {
				name, ok = strings.CutSuffix(name, suffix)
			}
			e, found := d.keyring().Keys[name]
			if !ok || !found || strings.Contains(name, "/") {
				return nil, mcp.ResourceNotFoundError(req.Params.URI)
			}
			return contents(req.Params.URI, mimeOf(req.Params.URI), pick(e)), nil
		}
	}
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: TemplateJWKS, Name: "key-jwks", Title: "JWKS of a key", MIMEType: mimeJWKS,
		Description: "A key's JWK Set (GET /v1/keys/{name}/jwks.json)."},
		keyDoc("/jwks.json", func(e *rotation.KeyEntry) jwksserve.Document { return e.JWKS }))
	srv.AddResourceTemplate(&mcp.ResourceTemplate{URITemplate: TemplateHistory, Name: "key-history-of", Title: "Key history of a key", MIMEType: mimeJSON,
		Description: "A key's key-history document (GET /v1/keys/{name}/history.json)."},
		keyDoc("/history.json", func(e *rotation.KeyEntry) jwksserve.Document { return e.History }))
}

func mimeOf(uri string) string {
	switch {
	case strings.HasSuffix(uri, "/jwks.json"):
		return mimeJWKS
	case strings.HasSuffix(uri, "/did.json"):
		return mimeDID
	}
	return mimeJSON
}

// contents is a resources/read result holding a document's exact bytes.
func contents(uri, mime string, doc jwksserve.Document) *mcp.ReadResourceResult {
	return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{{URI: uri, MIMEType: mime, Text: string(doc.Body)}}}
}
