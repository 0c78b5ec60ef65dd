package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 description of the HTTP API (openapi.yaml).
//
//go:embed openapi.yaml
var OpenAPI []byte
