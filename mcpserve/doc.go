// Package mcpserve is keysvc's own MCP endpoint: /mcp on the public
// listener, anonymous and read-only, so that an agent can check what a VRP
// node hands it without a CLI. It is built on the official Go SDK
// (github.com/modelcontextprotocol/go-sdk/mcp): an mcp.Server served by the
// SDK's Streamable HTTP handler, stateless (no sessions, no server-to-client
// requests, no SSE stream), answering application/json. ADR 0026 records
// the choices.
//
// # Tools
//
//   - verify_vrp_receipt: the VRP receipt v1 verifier (package verifier) —
//     plain against a given jwks, lifecycle-aware (VRP K2–K4, K6) against a
//     given history or a keysvc key's, and by default against keysvc's own
//     key histories, each signature routed by its JWS kid. log_keys and at
//     are passed to verifier.Options as they are. It never fetches a URL.
//   - get_key_history: a key's key-history document, byte for byte.
//   - hash_tool_arguments: the VRP MCP profile 1.0 arguments_sha256 and the
//     SEP-2828 fallback and v1 authorization-binding digests (package
//     signer).
//
// Bad tool input is a tool error (isError, structuredContent
// {"error": {"code", "message"}}) with a stable code; a receipt that does not
// verify is a result (receipt_valid, per-attestation status and error), not
// a tool error.
//
// # Resources
//
// The public documents, under the paths the listener serves them at:
// keysvc:///.well-known/jwks.json, keysvc:///.well-known/vrp-key-history.json,
// keysvc:///.well-known/did.json, and the templates
// keysvc:///v1/keys/{name}/jwks.json and keysvc:///v1/keys/{name}/history.json.
//
// # Transport validation
//
// One MCP revision is implemented, ProtocolVersion (2025-11-25). An
// initialize proposing another is answered with it (MCP lifecycle, version
// negotiation); every other request must carry MCP-Protocol-Version with it.
// Before the SDK sees a request, the front checks, in this order, and
// answers a JSON-RPC error object {"jsonrpc":"2.0","id":…,"error":{"code",
// "message","data":{"error": name, …}}} (id null unless it was read):
//
//	check                                   HTTP  code    data.error
//	per-client rate limit (RateLimit)       429   -32002  rate_limited (Retry-After)
//	Origin present, not in AllowedOrigins   403   -32001  origin_not_allowed
//	method other than POST (OPTIONS: CORS)  405   -32000  method_not_allowed (Allow)
//	Content-Type not application/json       415   -32600  unsupported_media_type
//	Accept lacks json or event-stream       406   -32600  not_acceptable
//	body over MaxBodyBytes                  413   -32600  body_too_large
//	not one strict JSON value               400   -32700  invalid_json, duplicate_key, invalid_utf8,
//	                                                      trailing_data, nesting_too_deep, empty_body
//	a JSON array (batch)                    400   -32600  batch_not_supported
//	not a JSON-RPC 2.0 request/notification 400   -32600  invalid_request
//	MCP-Protocol-Version missing            400   -32600  protocol_version_required
//	MCP-Protocol-Version not 2025-11-25     400   -32022  unsupported_protocol_version
//	                                                      (data.supported, data.requested)
//	method not served                       200   -32601  method_not_found
//
// A JSON-RPC request here is an object with exactly jsonrpc "2.0", a
// non-empty string method, optionally an id (string or integer, not null)
// and params (an object); responses are refused (the endpoint sends no
// requests). Batches were removed from MCP in 2025-06-18. An unknown
// notification is acknowledged (202) and ignored. The methods served are
// initialize, notifications/initialized, notifications/cancelled, ping,
// tools/list, tools/call, resources/list, resources/read and
// resources/templates/list.
//
// Requests without an Origin header (agents, SDK clients, curl) are served;
// a browser page may call the endpoint only from an origin in the
// allow-list, which then gets CORS headers. Origin is what defeats DNS
// rebinding here (MCP transports, security warning), so the SDK's loopback
// Host check, which would refuse keysvc behind a same-host reverse proxy,
// is off.
package mcpserve
