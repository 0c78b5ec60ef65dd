// Package interop holds keysvc's interoperability suite (issue 15): its
// tests run a keysvc API in-process behind TLS for several issuers and
// verify every layer and algorithm with independent implementations —
// go-jose, lestrrat-go/jwx and, through interop/jose, node jose and
// did-resolver + web-did-resolver — each fetching the public documents
// over HTTPS by the URL an attestation's source names. interop/mcp-ts
// holds the MCP TypeScript SDK check run by cmd/keysvc.
package interop
