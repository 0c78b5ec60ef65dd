package main

import (
	"errors"
	"log/slog"
	"net/http"
	"strings"

	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/mcpserve"
	"github.com/keysvc/keysvc/rotation"
)

// mcpFlags configure the anonymous, read-only MCP endpoint at /mcp on the
// public listener (package mcpserve, ADR 0026).
type mcpFlags struct {
	enabled   bool
	origins   string
	rateLimit float64
	rateBurst int
	maxBody   int64
}

func (m *mcpFlags) register(f *pflag.FlagSet) {
	f.BoolVar(&m.enabled, "mcp", envOr("KEYSVC_MCP", "true") == "true", "serve the anonymous, read-only MCP endpoint (verify_vrp_receipt, get_key_history, hash_tool_arguments, public documents) at /mcp on the public listener (env KEYSVC_MCP)")
	f.StringVar(&m.origins, "mcp-allowed-origins", envOr("KEYSVC_MCP_ALLOWED_ORIGINS", ""), "comma-separated browser origins (scheme://host[:port]) allowed to call /mcp; requests with any other Origin are refused, requests without Origin are served")
	f.Float64Var(&m.rateLimit, "mcp-rate-limit", mcpserve.DefaultRateLimit.PerSecond, "requests per second each client address (IPv4, or IPv6 /64) may send to /mcp (token bucket; 0 disables); over it: 429 rate_limited")
	f.IntVar(&m.rateBurst, "mcp-rate-burst", mcpserve.DefaultRateLimit.Burst, "token-bucket burst of --mcp-rate-limit")
	f.Int64Var(&m.maxBody, "mcp-max-body-bytes", mcpserve.DefaultMaxBodyBytes, "largest accepted /mcp request body")
}

// allowedOrigins splits --mcp-allowed-origins.
func (m *mcpFlags) allowedOrigins() []string {
	var out []string
	for _, o := range strings.Split(m.origins, ",") {
		if o = strings.TrimSpace(o); o != "" {
			out = append(out, o)
		}
	}
	return out
}

// handler returns the /mcp handler, or nil when --mcp=false.
func (m *mcpFlags) handler(mgr *rotation.Manager, log *slog.Logger) (http.Handler, error) {
	if !m.enabled {
		return nil, nil
	}
	rl := mcpserve.RateLimit{PerSecond: m.rateLimit, Burst: m.rateBurst}
	if m.rateLimit == 0 {
		rl.PerSecond = -1 // mcpserve: negative disables
	}
	return mcpserve.New(mcpserve.Config{Keyring: mgr.Keyring, AllowedOrigins: m.allowedOrigins(), MaxBodyBytes: m.maxBody,
		RateLimit: rl, Logger: log.With("surface", "mcp")})
}

func (m *mcpFlags) validate() error {
	if m.rateLimit < 0 || m.maxBody <= 0 {
		return errors.New("--mcp-rate-limit must not be negative and --mcp-max-body-bytes must be positive")
	}
	return mcpserve.CheckOrigins(m.allowedOrigins())
}
