package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
)

// TransportCall is a VRP MCP transport assertion request whose tool-call
// arguments travel as the raw JSON object received from the MCP client
// (RFC 8259 text), so that keysvc hashes exactly what the client sent: no
// decoding into Go maps (which would merge duplicate member names) and no
// re-encoding of numbers. The body of POST /v1/keys/{name}/mcp-transport
// and one item of its :batch form.
type TransportCall struct {
	Tool      string          `json:"tool"`
	Arguments json.RawMessage `json:"arguments"` // a JSON object; "{}" for none
	ServedAt  string          `json:"served_at,omitempty"`
	OfferRef  string          `json:"offer_ref,omitempty"`
	SessionID string          `json:"session_id,omitempty"`
	Ref       string          `json:"ref,omitempty"`
	ValidFor  string          `json:"valid_for,omitempty"` // Go duration, e.g. "1h"
}

// MCPTransportCall builds and signs one VRP MCP transport assertion from
// raw arguments (POST /v1/keys/{name}/mcp-transport, scope
// sign:NAME:transport). A non-2xx answer is an *Error with the server's
// stable code.
func (c *Client) MCPTransportCall(ctx context.Context, name string, call TransportCall) (TransportResult, error) {
	if len(call.Arguments) == 0 {
		call.Arguments = json.RawMessage("{}")
	}
	var out TransportResult
	err := c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/mcp-transport", call, &out)
	return out, err
}

// ItemError is the error of one batch item: the stable code and message
// the single-item endpoint would have answered.
type ItemError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *ItemError) Error() string { return e.Code + ": " + e.Message }

// TransportBatchResult is one item's outcome in MCPTransportBatch:
// exactly one of Result and Error is set.
type TransportBatchResult struct {
	Result *TransportResult `json:"result,omitempty"`
	Error  *ItemError       `json:"error,omitempty"`
}

// MCPTransportBatch signs up to the server's batch limit (100 by default)
// of transport assertions in one request (POST
// /v1/keys/{name}/mcp-transport:batch): every item with the same key
// version, results in item order. An item the server refuses (bad
// arguments, colliding keys) has its own Error; a failure of the whole
// request (authentication, backend unavailable, too many items) is an
// *Error, as for MCPTransportCall.
func (c *Client) MCPTransportBatch(ctx context.Context, name string, calls []TransportCall) ([]TransportBatchResult, error) {
	if len(calls) == 0 {
		return nil, errors.New("client: a batch needs at least one item")
	}
	items := make([]TransportCall, len(calls))
	for i, call := range calls {
		if len(call.Arguments) == 0 {
			call.Arguments = json.RawMessage("{}")
		}
		items[i] = call
	}
	var out struct {
		Results []TransportBatchResult `json:"results"`
	}
	if err := c.Do(ctx, http.MethodPost, "/v1/keys/"+url.PathEscape(name)+"/mcp-transport:batch", map[string]any{"items": items}, &out); err != nil {
		return nil, err
	}
	if len(out.Results) != len(calls) {
		return nil, fmt.Errorf("client: batch of %d items answered with %d results", len(calls), len(out.Results))
	}
	for i, r := range out.Results {
		if (r.Result == nil) == (r.Error == nil) {
			return nil, fmt.Errorf("client: batch result %d has neither or both of result and error", i)
		}
	}
	return out.Results, nil
}
