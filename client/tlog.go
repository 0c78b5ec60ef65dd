package client

import (
	"context"
	"net/http"
	"net/url"
)

// TlogProof fetches the tlog member for an attestation's signature (the
// compact JWS exactly as issued) from GET /v1/tlog/proof: the
// transparency-log inclusion proof with the log's tree head and witnessed
// checkpoint, byte for byte as the log serves it. An *Error with code
// tlog_not_found means no log has the leaf yet; retry later.
func (c *Client) TlogProof(ctx context.Context, jws string) ([]byte, error) {
	var raw []byte
	err := c.Do(ctx, http.MethodGet, "/v1/tlog/proof?jws="+url.QueryEscape(jws), nil, &raw)
	return raw, err
}
