package mcpserve

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/keysvc/keysvc/rotation"
)

// Path is where keysvc's public listener serves the endpoint.
const Path = "/mcp"

// DefaultMaxBodyBytes bounds a request body when Config.MaxBodyBytes is 0:
// room for a receipt of some hundred attestations and a key history given
// inline.
const DefaultMaxBodyBytes = 256 << 10

// Config configures the endpoint.
type Config struct {
	// Keyring returns keysvc's current key documents (rotation.Manager's
	// Keyring): the JWKS, key-history and did:web documents served as
	// resources, and the key histories verify_vrp_receipt knows. Required.
	Keyring func() *rotation.Keyring
	// AllowedOrigins are the browser origins (scheme://host[:port]) that
	// may call the endpoint. A request with any other Origin header is
	// refused (403 origin_not_allowed); requests without Origin (agents,
	// SDK clients, curl) are served. Empty: no browser origin.
	AllowedOrigins []string
	// MaxBodyBytes bounds a request body (default DefaultMaxBodyBytes).
	MaxBodyBytes int64
	// RateLimit bounds requests per client address (zero value:
	// DefaultRateLimit; PerSecond < 0 disables it).
	RateLimit RateLimit
	// Version is the serverInfo version (default "dev").
	Version string
	Logger  *slog.Logger
	// Now is the clock of verify_vrp_receipt's default "at" and of the rate
	// limit (default time.Now).
	Now func() time.Time
}

// New returns the endpoint's http.Handler: the transport front (see the
// package documentation) around the official SDK's Streamable HTTP handler,
// stateless, answering application/json, serving one MCP server with the
// tools and resources of this package.
func New(cfg Config) (http.Handler, error) {
	if cfg.Keyring == nil {
		return nil, fmt.Errorf("mcpserve: Config.Keyring is required")
	}
	origins, err := parseOrigins(cfg.AllowedOrigins)
	if err != nil {
		return nil, err
	}
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = DefaultMaxBodyBytes
	}
	switch {
	case cfg.RateLimit == RateLimit{}:
		cfg.RateLimit = DefaultRateLimit
	case cfg.RateLimit.PerSecond < 0:
		cfg.RateLimit = RateLimit{}
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	// The SDK logs every stateless session at Info; keep its warnings.
	sdkLog := slog.New(minLevel{slog.LevelWarn, cfg.Logger.Handler()})
	srv := mcp.NewServer(&mcp.Implementation{Name: "keysvc", Title: "keysvc verifier", Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: "Anonymous, read-only verifier of VRP receipts and keysvc's public key documents. " +
			"verify_vrp_receipt checks a VRP receipt v1 (lifecycle-aware against keysvc's key histories by default); " +
			"get_key_history returns a key's full key-history document; hash_tool_arguments computes the VRP " +
			"arguments_sha256 and SEP-2828 digests of a tools/call. Nothing here signs, fetches URLs or writes.",
		Logger:                    sdkLog,
		SupportedProtocolVersions: []string{ProtocolVersion},
		// Stateless: no list-changed notifications, no logging, no
		// subscriptions.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}, Resources: &mcp.ResourceCapabilities{}},
		GetSessionID: func() string { return "" },
	})
	d := &docs{keyring: cfg.Keyring, now: cfg.Now}
	addTools(srv, d)
	addResources(srv, d)
	sdk := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, &mcp.StreamableHTTPOptions{
		Stateless:    true,
		JSONResponse: true,
		Logger:       sdkLog,
		// The front checks Origin against the allow-list; the SDK's
		// loopback Host check would refuse keysvc behind a reverse proxy
		// on the same host.
		DisableLocalhostProtection: true,
		MaxRequestBodyBytes:        cfg.MaxBodyBytes,
	})
	return &front{next: sdk, origins: origins, maxBody: cfg.MaxBodyBytes, limits: newClientLimits(cfg.RateLimit, cfg.Now)}, nil
}

// minLevel drops records below a level.
type minLevel struct {
	level slog.Level
	slog.Handler
}

func (h minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= h.level && h.Handler.Enabled(ctx, l)
}

func (h minLevel) WithAttrs(a []slog.Attr) slog.Handler {
	return minLevel{h.level, h.Handler.WithAttrs(a)}
}
func (h minLevel) WithGroup(g string) slog.Handler { return minLevel{h.level, h.Handler.WithGroup(g)} }
