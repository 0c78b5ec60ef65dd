package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/internal/strictjson"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/store"
)

const (
	devTokenFile = "dev-token"
	devKeyName   = "dev"
)

func init() { extraCommands = append(extraCommands, newServeCmd) }

// backendFactory adds an optional key backend to serve: its flags, and a
// constructor that returns (nil, nil) when the backend is not configured.
// Backend files register one from init().
type backendFactory struct {
	kind  string
	flags func(*pflag.FlagSet)
	open  func(ctx context.Context, log *slog.Logger) (backends.Backend, error)
	// check, when set, validates what open would refuse without opening
	// anything (keysvc config check); nil when not configured.
	check func() error
}

var backendFactories []backendFactory

type serveOptions struct {
	store             storeFlags
	listen            string
	kekFile           string
	dev               bool
	devIssuer         string
	migrate           bool
	defaultKey        string
	reloadEvery       time.Duration
	maxBodyBytes      int64
	jwksMaxAge        time.Duration
	schedEvery        time.Duration
	servedAtSkew      time.Duration
	pprof             bool
	gcPercent         int
	rateLimit         float64
	rateBurst         int
	publicRateLimit   float64
	publicRateBurst   int
	defaultPrepublish time.Duration
	clientPrincipals  string
	propagation       time.Duration
	clockSkew         time.Duration
	tlog              tlogFlags
	anchor            anchorFlags

	configFile string
	mcp        mcpFlags
	// noFiles: validate checks values only and opens no file (TLS
	// certificates, client CAs, the principals file): config check
	// --syntax-only.
	noFiles bool
	// gcPercentSet: --gc-percent came from a flag, KEYSVC_GC_PERCENT or
	// the config file, not its default (gcPercentFor).
	gcPercentSet bool

	tlsCert, tlsKey                                       string // the public listener's TLS (issue 15)
	signListen, signTLSCert, signTLSKey, signClientCA     string
	adminListen, adminTLSCert, adminTLSKey, adminClientCA string
}

func newServeCmd() *cobra.Command {
	cmd, _ := newServeCmdWith()
	return cmd
}

// newServeCmdWith returns the serve command and the options its flags fill.
func newServeCmdWith() (*cobra.Command, *serveOptions) {
	o := &serveOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the keysvc HTTP service (public JWKS, signing API, admin API)",
		Long: `Run the keysvc HTTP service.

Key history is PostgreSQL when --postgres-url (KEYSVC_POSTGRES_URL) is set,
otherwise an embedded SQLite file in --data-dir.

--dev is for a first run on one machine: it creates a key-encryption key
(mode 0600) and a dev API token in --data-dir if missing, creates a key
named "dev" if there is no key yet, and signs a sample VRP MCP transport
assertion through its own HTTP API once it is listening.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyConfig(cmd.Flags(), o.configFile); err != nil {
				return err
			}
			o.gcPercentSet = cmd.Flags().Changed("gc-percent")
			if err := o.validate(); err != nil {
				return err
			}
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	cmd.Flags().StringVar(&o.configFile, "config", envOr("KEYSVC_CONFIG", ""), "YAML configuration file; keys are these flag names (env KEYSVC_CONFIG). Precedence: flags, then KEYSVC_* environment, then the file")
	o.store.register(cmd)
	f := cmd.Flags()
	for _, bf := range backendFactories {
		bf.flags(f)
	}
	f.StringVar(&o.listen, "listen", envOr("KEYSVC_LISTEN", "127.0.0.1:8080"), "public listener: JWKS, key history, did:web, health (env KEYSVC_LISTEN); also the signing and admin APIs unless they have their own")
	f.StringVar(&o.tlsCert, "tls-cert", envOr("KEYSVC_TLS_CERT", ""), "TLS certificate (PEM) of the public listener, e.g. for did:web on the issuer's domain; reloaded when the file changes (with --tls-key)")
	f.StringVar(&o.tlsKey, "tls-key", envOr("KEYSVC_TLS_KEY", ""), "TLS private key (PEM) of the public listener (with --tls-cert)")
	f.StringVar(&o.signListen, "sign-listen", envOr("KEYSVC_SIGN_LISTEN", ""), "separate listener for the signing API (env KEYSVC_SIGN_LISTEN)")
	f.StringVar(&o.signTLSCert, "sign-tls-cert", envOr("KEYSVC_SIGN_TLS_CERT", ""), "TLS certificate (PEM) of the signing listener")
	f.StringVar(&o.signTLSKey, "sign-tls-key", envOr("KEYSVC_SIGN_TLS_KEY", ""), "TLS private key (PEM) of the signing listener")
	f.StringVar(&o.signClientCA, "sign-client-ca", envOr("KEYSVC_SIGN_CLIENT_CA", ""), "CA bundle (PEM): require client certificates on the signing listener (mutual TLS)")
	f.StringVar(&o.adminListen, "admin-listen", envOr("KEYSVC_ADMIN_LISTEN", ""), "separate listener for the admin API (env KEYSVC_ADMIN_LISTEN); recommended in production")
	f.StringVar(&o.adminTLSCert, "admin-tls-cert", envOr("KEYSVC_ADMIN_TLS_CERT", ""), "TLS certificate (PEM) of the admin listener")
	f.StringVar(&o.adminTLSKey, "admin-tls-key", envOr("KEYSVC_ADMIN_TLS_KEY", ""), "TLS private key (PEM) of the admin listener")
	f.StringVar(&o.clientPrincipals, "client-principals", envOr("KEYSVC_CLIENT_PRINCIPALS", ""), `JSON file mapping verified client certificates to principals, for requests without a token, each bound to a listener and a CA of its client CA bundle: [{"listener":"admin","ca_sha256":"<hex SHA-256 of the CA certificate DER>","common_name":"officer-1","name":"alice","scopes":["admin:keys"]}]`)
	f.StringVar(&o.adminClientCA, "admin-client-ca", envOr("KEYSVC_ADMIN_CLIENT_CA", ""), "CA bundle (PEM): require client certificates on the admin listener (mutual TLS)")
	f.StringVar(&o.kekFile, "kek-file", envOr("KEYSVC_KEK_FILE", ""), "software backend key-encryption key file, base64 of 32 bytes, mode 0600 (env KEYSVC_KEK_FILE); default <data-dir>/kek")
	f.BoolVar(&o.dev, "dev", false, "development mode: create the KEK, a dev token and a dev key if missing")
	f.StringVar(&o.devIssuer, "dev-issuer", envOr("KEYSVC_DEV_ISSUER", "localhost"), "issuer of the dev key created by --dev")
	f.BoolVar(&o.migrate, "migrate", envOr("KEYSVC_MIGRATE_ON_START", "true") == "true", "apply database migrations at start (env KEYSVC_MIGRATE_ON_START)")
	f.StringVar(&o.defaultKey, "default-key", envOr("KEYSVC_DEFAULT_KEY", ""), "key served at /.well-known/jwks.json (env KEYSVC_DEFAULT_KEY); default: the oldest key")
	f.DurationVar(&o.reloadEvery, "reload-interval", 5*time.Second, "how often to re-read key history and tokens written by other processes")
	f.Int64Var(&o.maxBodyBytes, "max-body-bytes", 64<<10, "largest accepted request body")
	f.DurationVar(&o.jwksMaxAge, "jwks-max-age", 300*time.Second, "Cache-Control max-age of the public JWKS (at most 5m, VRP §3.1; 0 disables caching); a rotation policy's prepublish must exceed it")
	f.DurationVar(&o.defaultPrepublish, "default-prepublish", 0, "prepublish of rotation policies that set none; must exceed --jwks-max-age (default twice it)")
	f.DurationVar(&o.schedEvery, "scheduler-interval", time.Second, "how often the rotation scheduler checks policies (it also wakes at each due instant)")
	f.Float64Var(&o.rateLimit, "rate-limit", 10000, "requests per second each API token may make (token bucket; 0 disables); over it: 429 with Retry-After")
	f.IntVar(&o.rateBurst, "rate-burst", 20000, "token-bucket burst of --rate-limit")
	f.Float64Var(&o.publicRateLimit, "public-rate-limit", 2000, "unauthenticated requests per second, all clients together: public documents (JWKS, key history, did:web) and failed authentications (token bucket; 0 disables; health checks are never limited); over it: 429 with Retry-After")
	f.IntVar(&o.publicRateBurst, "public-rate-burst", 4000, "token-bucket burst of --public-rate-limit")
	f.DurationVar(&o.servedAtSkew, "max-served-at-skew", 5*time.Minute, "how far a caller-given served_at may lie from the server's clock, either way")
	f.DurationVar(&o.propagation, "propagation-bound", 2*time.Second, "L: every activation is committed at least this long before it takes effect, and a replica signs only while it confirmed its key history current within L - max-clock-skew - min(250ms, L/8) (ADR 0014)")
	f.DurationVar(&o.clockSkew, "max-clock-skew", 250*time.Millisecond, "how far any replica's clock may be from the database's (ADR 0014); shortens the signing lease")
	o.mcp.register(f)
	o.tlog.register(f)
	o.anchor.register(f)
	f.IntVar(&o.gcPercent, "gc-percent", defaultGCPercent, "the Go garbage collector's target percentage, as GOGC: the heap may grow this much over the live heap before a collection (ADR 0041: keysvc's live heap is a few MiB, so at Go's 100 a loaded server collects every few tens of milliseconds). When this flag is left at its default and GOGC is set, GOGC applies. GOMEMLIMIT applies as usual")
	f.BoolVar(&o.pprof, "pprof", false, "serve runtime profiles (net/http/pprof) at /debug/pprof/ on the admin listener, for a token with admin:keys; for performance work, off in production")
	return cmd, o
}

// validate checks option values that flags alone cannot.
func (o *serveOptions) validate() error {
	if o.jwksMaxAge < 0 || o.jwksMaxAge > 5*time.Minute || o.jwksMaxAge%time.Second != 0 {
		return fmt.Errorf("--jwks-max-age %s: must be whole seconds between 0s and 5m (VRP §3.1 caps JWKS caching at 5 minutes)", o.jwksMaxAge)
	}
	if o.defaultPrepublish != 0 && o.defaultPrepublish <= o.jwksMaxAge {
		return fmt.Errorf("--default-prepublish %s must exceed the JWKS Cache-Control max-age %s: verifiers may cache the JWKS that long, so a new version must be published for longer than that before it signs (VRP K3)", o.defaultPrepublish, o.jwksMaxAge)
	}
	if o.servedAtSkew <= 0 || o.reloadEvery <= 0 || o.schedEvery <= 0 {
		return errors.New("--max-served-at-skew, --reload-interval and --scheduler-interval must be positive")
	}
	if o.propagation < 500*time.Millisecond || o.clockSkew < 0 {
		return fmt.Errorf("--propagation-bound %s must be at least 500ms and --max-clock-skew %s not negative", o.propagation, o.clockSkew)
	}
	if lease := o.propagation - o.clockSkew - min(250*time.Millisecond, o.propagation/8); lease < o.propagation/4 {
		return fmt.Errorf("--max-clock-skew %s leaves a signing lease of %s with --propagation-bound %s; it must be at least a quarter of the bound (raise --propagation-bound)", o.clockSkew, lease, o.propagation)
	}
	if o.gcPercent < 1 {
		return fmt.Errorf("--gc-percent %d: must be at least 1 (to turn collection off, which only a memory limit then bounds, set GOGC=off and GOMEMLIMIT yourself)", o.gcPercent)
	}
	if o.rateLimit < 0 || o.publicRateLimit < 0 || o.maxBodyBytes <= 0 {
		return errors.New("--rate-limit and --public-rate-limit must not be negative and --max-body-bytes must be positive")
	}
	ls, err := o.listeners()
	if err != nil {
		return err
	}
	seen := map[string]string{}
	for _, l := range ls {
		flag := "--listen"
		if l.name == "sign" || l.name == "admin" {
			flag = "--" + l.name + "-listen"
		}
		host, port, err := net.SplitHostPort(l.addr)
		if err != nil {
			return fmt.Errorf("%s %q: want HOST:PORT, e.g. 127.0.0.1:8080 (%v)", flag, l.addr, err)
		}
		if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
			return fmt.Errorf("%s %q: port %q is not a number from 0 to 65535", flag, l.addr, port)
		}
		if port != "0" {
			if other, dup := seen[host+":"+port]; dup {
				return fmt.Errorf("%s %q is also %s: each listener needs its own address (or leave %s empty to serve that surface on --listen)", flag, l.addr, other, flag)
			}
			seen[host+":"+port] = flag
		}
	}
	if err := o.mcp.validate(); err != nil {
		return err
	}
	if err := o.tlog.validate(); err != nil {
		return err
	}
	if err := o.anchor.validate(); err != nil {
		return err
	}
	if o.noFiles {
		return nil
	}
	_, err = o.loadClientPrincipals()
	return err
}

// defaultGCPercent is serve's garbage-collection target percentage
// (ADR 0041): measured on the signing routes, 400 took 4-10 % off a single
// sign's server CPU and about 2.5 µs off each batch signature, with idle
// RSS unchanged; 800 gained nothing more.
const defaultGCPercent = 400

// gcPercentFor is the percentage serve gives debug.SetGCPercent, and
// whether to set one at all: the flag's value when it was set by a flag,
// KEYSVC_GC_PERCENT or the config file (set), else the runtime's own
// reading of GOGC when that is set (ok false: leave it), else the flag's
// default.
func gcPercentFor(flag int, set bool, gogc string) (percent int, ok bool) {
	if !set && gogc != "" {
		return 0, false
	}
	return flag, true
}

func (o *serveOptions) run(ctx context.Context, stdout io.Writer) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	maxAge := o.jwksMaxAge
	if maxAge == 0 {
		maxAge = -1 // rotation.Config: negative means no caching
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if p, ok := gcPercentFor(o.gcPercent, o.gcPercentSet, os.Getenv("GOGC")); ok {
		debug.SetGCPercent(p)
		log.Info("garbage collection", "gc_percent", p)
	} else {
		// The runtime's reading of GOGC (100 for a value it cannot parse,
		// negative for off), read back through the setter.
		inForce := debug.SetGCPercent(100)
		debug.SetGCPercent(inForce)
		log.Info("garbage collection", "gc_percent", inForce, "gogc", os.Getenv("GOGC"))
	}
	// ADR 0044: the batch signer's known-answer check, at start on the
	// machine that signs; a failure is kept (batches are then signed one
	// signature at a time) and said.
	if !signer.BatchSigningAgrees() {
		log.Error("Ed25519 batch signing failed its known-answer check against crypto/ed25519 on this machine; batch items are signed one at a time (ADR 0044)")
	}

	// Bind every listener first: a port in use, or an address that is no
	// address, fails before anything is created (KEK, dev token, dev key).
	listeners, err := o.listeners()
	if err != nil {
		return err
	}
	lns := make([]net.Listener, len(listeners))
	for i, l := range listeners {
		ln, err := net.Listen("tcp", l.addr)
		if err != nil {
			for _, prev := range lns[:i] {
				prev.Close()
			}
			return fmt.Errorf("%s listener: %w", l.name, err)
		}
		lns[i] = ln
	}
	defer func() {
		for _, ln := range lns {
			ln.Close() // after Serve took it: already closed by Shutdown
		}
	}()

	if err := os.MkdirAll(o.store.dataDir, 0o700); err != nil {
		return err
	}
	if o.store.config().PostgresURL == "" {
		// One serve per SQLite key history (README: one process only).
		unlock, err := lockDataDir(o.store.dataDir)
		if err != nil {
			return err
		}
		defer unlock()
	}
	kekFile := o.kekFile
	if kekFile == "" {
		kekFile = filepath.Join(o.store.dataDir, "kek")
	}
	// The data directory matters when it holds something: the SQLite key
	// history, the default KEK, the dev token.
	if o.store.config().PostgresURL == "" || o.kekFile == "" || o.dev {
		warning, err := checkDataDir(o.store.dataDir)
		if err != nil {
			return err
		}
		if warning != "" {
			log.Warn(warning)
		}
		o.store.dirChecked = true
	}
	if o.dev {
		if _, err := os.Stat(kekFile); errors.Is(err, os.ErrNotExist) {
			if err := software.CreateKEKFile(kekFile); err != nil {
				return err
			}
			log.Warn("dev mode: created a new key-encryption key; back it up — sealed keys cannot be opened without it", "kek_file", kekFile)
		}
	}
	kek, err := software.ReadKEKFile(kekFile)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w\ncreate a key-encryption key with: head -c 32 /dev/urandom | base64 > %s && chmod 600 %s (and back it up), or run with --dev on a development machine", err, kekFile, kekFile)
	}
	if err != nil {
		return err
	}
	soft, err := software.New(kek)
	clear(kek)
	if err != nil {
		return err
	}

	st, err := o.store.open(ctx, o.migrate)
	if err != nil {
		return err
	}
	defer st.Close()

	all := []backends.Backend{soft}
	for _, bf := range backendFactories {
		b, err := bf.open(ctx, log)
		if err != nil {
			return fmt.Errorf("backend %s: %w", bf.kind, err)
		}
		if b != nil {
			defer b.Close()
			all = append(all, b)
		}
	}
	// The log client runs before key history is loaded: with
	// --anchor-key-file, every change is anchored and every reload checked
	// against the log (ADR 0016).
	tl, err := o.tlog.start(ctx, st, log, o.store.dataDir, kekFile, o.dev)
	if err != nil {
		return err
	}
	defer tl.stop() // after the listeners shut down below: every answered JWS is in the outbox
	anc, err := o.anchor.start(ctx, st, tl, log, o.dev)
	if err != nil {
		return fmt.Errorf("key-history anchoring: %w", err)
	}
	var history rotation.HistoryChecker
	if anc != nil {
		st = anc.Wrap(st)
		history = anc
	}
	mgr := rotation.New(rotation.Config{Store: st, History: history, Backends: all, DefaultKey: o.defaultKey, Logger: log, JWKSMaxAge: maxAge, DefaultPrepublish: o.defaultPrepublish,
		MinRetention: api.DefaultMaxValidFor + o.servedAtSkew, PropagationBound: o.propagation, MaxClockSkew: o.clockSkew})
	if err := mgr.Reload(ctx); err != nil {
		return fmt.Errorf("loading key history: %w", err)
	}
	auth := api.NewAuthenticator(st, log)
	if anc != nil {
		auth.SetTokenChecker(anc) // ADR 0053
	}
	var devToken string
	if o.dev {
		if devToken, err = ensureDevToken(ctx, st, filepath.Join(o.store.dataDir, devTokenFile), log); err != nil {
			return err
		}
	}
	if err := auth.Refresh(ctx); err != nil {
		return err
	}
	if auth.Usable(time.Now()) == 0 {
		if n := auth.Unconfirmed(); n > 0 {
			log.Warn("no API token is accepted until a transparency log confirms the tokens stored (ADR 0053); serving, and checking again every --reload-interval", "unconfirmed", n)
		} else {
			return errors.New("no usable API token: create one with `keysvc tokens create --name NAME --scope sign:* --scope admin:keys`, or run with --dev on a development machine")
		}
	}
	if o.dev && len(mgr.Keyring().Keys) == 0 {
		if _, _, err := mgr.CreateKey(ctx, rotation.CreateKeyRequest{Name: devKeyName, Issuer: o.devIssuer}, rotation.Actor{Name: "keysvc --dev", Reason: "dev mode first run"}); err != nil {
			return fmt.Errorf("creating the dev key: %w", err)
		}
	}

	principals, err := o.loadClientPrincipals()
	if err != nil {
		return err
	}
	mcpHandler, err := o.mcp.handler(mgr, log)
	if err != nil {
		return err
	}
	handler := api.New(api.Config{Manager: mgr, Auth: auth, Store: st, Logger: log, MaxBodyBytes: o.maxBodyBytes, ClientPrincipals: principals,
		MaxServedAtSkew: o.servedAtSkew, Pprof: o.pprof, RateLimit: api.RateLimit{PerSecond: o.rateLimit, Burst: o.rateBurst},
		PublicRateLimit: api.RateLimit{PerSecond: o.publicRateLimit, Burst: o.publicRateBurst}, MCP: mcpHandler, Tlog: withOwedEvents(tl.api(), anc, max(o.tlog.maxBacklogAge, anchorOwedUnready)), Build: buildInfo()})
	if !o.dev && o.adminListen == "" {
		log.Warn("the admin API shares the public listener; set --admin-listen (and --admin-tls-*) to keep it off the network verifiers and nodes reach")
	}
	var servers []*http.Server
	errc := make(chan error, len(listeners))
	signURL := ""
	for i, l := range listeners {
		srv := newHTTPServer(handler.HandlerForListener(l.name, l.surface))
		srv.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
		srv.TLSConfig = l.tls
		ln := lns[i]
		scheme := "http"
		if l.tls != nil {
			scheme = "https"
		}
		log.Info("listening", "surface", l.name, "addr", ln.Addr().String(), "tls", l.tls != nil,
			"client_certs", l.tls != nil && l.tls.ClientAuth == tls.RequireAndVerifyClientCert,
			"store", o.store.describe(), "keys", len(mgr.Keyring().Keys), "dev", o.dev)
		if l.surface&api.SurfaceSign != 0 && l.tls == nil {
			signURL = scheme + "://" + ln.Addr().String()
		}
		servers = append(servers, srv)
		go func() {
			if l.tls != nil {
				errc <- srv.ServeTLS(ln, "", "")
			} else {
				errc <- srv.Serve(ln)
			}
		}()
	}

	go auth.Run(ctx, o.reloadEvery)
	if anc != nil {
		anc.OnChange(func() {
			if err := mgr.Reload(ctx); err != nil {
				log.Warn("keyring reload after a key-history check changed failed; retrying on the next reload", "err", err)
			}
		})
		go anc.Run(ctx, o.anchor.checkEvery)
	}
	go mgr.RunFreshness(ctx, o.reloadEvery)
	go mgr.Watch(ctx)
	go mgr.RunScheduler(ctx, o.schedEvery)

	if o.dev && signURL != "" {
		if err := devDemo(ctx, stdout, signURL, devToken, mgr.Keyring().Default, filepath.Join(o.store.dataDir, devTokenFile)); err != nil {
			log.Warn("dev demo signature failed", "err", err)
		}
		if tl != nil && tl.EmbeddedURL != "" {
			fmt.Fprintf(stdout, "Transparency log (embedded, dev key): %s\n  keysvc receipt prove receipt.json --server %s   # insert the tlog proofs\n", tl.EmbeddedURL, signURL)
		}
	}

	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down")
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var errs []error
	for _, srv := range servers {
		errs = append(errs, srv.Shutdown(shutdownCtx))
	}
	return errors.Join(errs...)
}

// newHTTPServer is every listener's http.Server: timeouts against slow
// clients (read-header 5 s, read and write 15 s, idle 120 s) and 16 KiB of
// request headers at most. keysvc bench's HTTP floor uses it too, so that
// the floor pays for the same deadlines.
func newHTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       15 * time.Second,
		WriteTimeout:      15 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    16 << 10,
	}
}

// loadClientPrincipals reads the --client-principals file (strict JSON):
// [{"listener":"admin","ca_sha256":"<hex>","common_name":"officer-1",
// "name":"alice","scopes":["admin:revoke"]}]. Each entry binds a principal
// to the listener whose client CA verifies the certificate and to one CA
// certificate of that listener's --<listener>-client-ca bundle (the SHA-256
// of its DER, e.g. `openssl x509 -in ca.pem -outform DER | sha256sum`), so
// a certificate from another listener's CA, or another CA of the bundle,
// never takes the name (issue 13). Names follow the API token name rules,
// and one name is one person across tokens and certificates.
func (o *serveOptions) loadClientPrincipals() ([]api.ClientPrincipal, error) {
	path := o.clientPrincipals
	if path == "" {
		return nil, nil
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--client-principals: %w", err)
	}
	var list []struct {
		Listener   string   `json:"listener"`
		CASHA256   string   `json:"ca_sha256"`
		CommonName string   `json:"common_name"`
		Name       string   `json:"name"`
		Scopes     []string `json:"scopes"`
	}
	if err := strictjson.Decode(raw, &list, strictjson.Limits{}); err != nil {
		return nil, fmt.Errorf("--client-principals %s: %w", path, err)
	}
	cas := map[string]map[string]bool{} // listener -> CA fingerprints of its client CA bundle
	for _, l := range []struct{ name, ca string }{{"sign", o.signClientCA}, {"admin", o.adminClientCA}} {
		if l.ca == "" {
			continue
		}
		fps, err := certFingerprints(l.ca)
		if err != nil {
			return nil, fmt.Errorf("--%s-client-ca: %w", l.name, err)
		}
		cas[l.name] = fps
	}
	var out []api.ClientPrincipal
	seen := map[[3]string]bool{}
	for i, p := range list {
		where := fmt.Sprintf("--client-principals %s: entry %d", path, i)
		fp := strings.ToLower(strings.ReplaceAll(p.CASHA256, ":", ""))
		switch {
		case p.Listener == "" || p.CASHA256 == "" || p.CommonName == "" || p.Name == "" || len(p.Scopes) == 0:
			return nil, fmt.Errorf("%s: every entry needs listener, ca_sha256, common_name, name and scopes", where)
		case p.Listener != "sign" && p.Listener != "admin":
			return nil, fmt.Errorf("%s: listener must be \"sign\" or \"admin\", got %q", where, p.Listener)
		case cas[p.Listener] == nil:
			return nil, fmt.Errorf("%s: listener %q verifies no client certificates (set --%s-client-ca)", where, p.Listener, p.Listener)
		case !cas[p.Listener][fp]:
			return nil, fmt.Errorf("%s: ca_sha256 %s is no certificate of --%s-client-ca", where, p.CASHA256, p.Listener)
		case !api.ValidPrincipalName(p.Name):
			return nil, fmt.Errorf("%s: name %q must be lower-case letters, digits and . _ @ - (at most 64)", where, p.Name)
		}
		for _, sc := range p.Scopes {
			if !validScope(sc) {
				return nil, fmt.Errorf("%s: unknown scope %q", where, sc)
			}
		}
		k := [3]string{p.Listener, fp, p.CommonName}
		if seen[k] {
			return nil, fmt.Errorf("%s: common_name %q of that listener and CA listed twice", where, p.CommonName)
		}
		seen[k] = true
		out = append(out, api.ClientPrincipal{Listener: p.Listener, CASHA256: fp, CommonName: p.CommonName,
			Principal: api.Principal{Name: p.Name, Scopes: p.Scopes}})
	}
	return out, nil
}

// certFingerprints returns the hex SHA-256 of the DER of every certificate
// in a PEM bundle.
func certFingerprints(file string) (map[string]bool, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	out := map[string]bool{}
	for {
		var b *pem.Block
		b, raw = pem.Decode(raw)
		if b == nil {
			break
		}
		if b.Type == "CERTIFICATE" {
			sum := sha256.Sum256(b.Bytes)
			out[hex.EncodeToString(sum[:])] = true
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no PEM certificates", file)
	}
	return out, nil
}

// listener is one of serve's listeners.
type listener struct {
	name    string
	addr    string
	surface api.Surface
	tls     *tls.Config
}

// listeners returns the public listener, serving the signing and admin
// surfaces too unless they have listeners of their own.
func (o *serveOptions) listeners() ([]listener, error) {
	pub := listener{name: "public", addr: o.listen, surface: api.SurfacePublic}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if o.tlsCert != "" {
		cfg, err := tlsConfig("public", o.tlsCert, o.tlsKey, "")
		if err != nil {
			return nil, err
		}
		pub.tls = cfg
	}
	out := []listener{}
	for _, l := range []struct {
		name, addr, cert, key, ca string
		surface                   api.Surface
	}{
		{"sign", o.signListen, o.signTLSCert, o.signTLSKey, o.signClientCA, api.SurfaceSign},
		{"admin", o.adminListen, o.adminTLSCert, o.adminTLSKey, o.adminClientCA, api.SurfaceAdmin},
	} {
		if l.addr == "" {
			if l.cert != "" || l.ca != "" {
				return nil, fmt.Errorf("--%s-tls-* and --%s-client-ca need --%s-listen", l.name, l.name, l.name)
			}
			pub.surface |= l.surface
			pub.name += "+" + l.name
			continue
		}
		var cfg *tls.Config
		var err error
		if o.noFiles {
			if (l.cert == "") != (l.key == "") || (l.ca != "" && l.cert == "") {
				return nil, fmt.Errorf("--%s-tls-cert and --%s-tls-key go together, and --%s-client-ca needs both", l.name, l.name, l.name)
			}
		} else if cfg, err = tlsConfig(l.name, l.cert, l.key, l.ca); err != nil {
			return nil, err
		}
		out = append(out, listener{name: l.name, addr: l.addr, surface: l.surface, tls: cfg})
	}
	return append([]listener{pub}, out...), nil
}

// tlsConfig loads a listener's certificate and, with a client CA, requires
// and verifies client certificates (mutual TLS). No certificate: plain HTTP.
func tlsConfig(name, certFile, keyFile, caFile string) (*tls.Config, error) {
	if certFile == "" && keyFile == "" {
		if caFile != "" {
			return nil, fmt.Errorf("--%s-client-ca needs --%s-tls-cert and --%s-tls-key", name, name, name)
		}
		return nil, nil
	}
	// The certificate reloads when its files change (certReloader).
	cfg, err := reloadingTLS(name, certFile, keyFile, slog.Default())
	if err != nil {
		return nil, err
	}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("%s listener client CA: %w", name, err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("%s listener client CA %s: no PEM certificates", name, caFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.RequireAndVerifyClientCert
	}
	return cfg, nil
}

// ensureDevToken returns the dev token stored in path (mode 0600), creating
// a new one — in key history and in path — when the file is missing or
// its token is not a usable row of key history (the database was reset,
// or the token revoked). A token id is never registered twice: a
// revoked token's id may have its revocation anchored (ADR 0053).
func ensureDevToken(ctx context.Context, st store.Store, path string, log *slog.Logger) (string, error) {
	if b, err := os.ReadFile(path); err == nil {
		tok := strings.TrimSpace(string(b))
		if known, err := tokenKnown(ctx, st, tok); err != nil || known {
			return tok, err
		}
		log.Warn("dev mode: the dev token in the data directory is not a usable token of this key history (database reset, or token revoked); creating a new one", "file", path)
	}
	tok, _, err := api.CreateToken(ctx, st, "dev", devScopes, 0, devTokenAudit)
	if err != nil {
		return "", err
	}
	if err := writeFileAtomic(path, []byte(tok+"\n")); err != nil { // mode 0600
		return "", err
	}
	return tok, nil
}

// devTokenAudit is how --dev's token changes appear in the audit trail.
var devTokenAudit = api.TokenAudit{Actor: "keysvc serve --dev", Reason: "dev mode token"}

var devScopes = []string{api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead}

func tokenKnown(ctx context.Context, st store.Store, tok string) (bool, error) {
	list, err := st.ListTokens(ctx)
	if err != nil {
		return false, err
	}
	h := api.TokenHash(tok)
	for _, t := range list {
		if string(t.SHA256) == string(h[:]) && t.RevokedAt == nil {
			return true, nil
		}
	}
	return false, nil
}

// devDemo signs a sample transport assertion through the service's own
// HTTP API and prints it, with the commands to do the same by hand.
func devDemo(ctx context.Context, w io.Writer, base, token, key, tokenPath string) error {
	if key == "" {
		return errors.New("no key")
	}
	c := client.New(base, token)
	res, err := c.MCPTransport(ctx, key, client.TransportRequest{
		Tool:      "get_verified_stay_offer",
		Arguments: map[string]any{"checkIn": "2026-09-02", "checkOut": "2026-09-05", "guests": 2},
		OfferRef:  "offer:example:2026-09-02/05",
	})
	if err != nil {
		return err
	}
	att, _ := json.MarshalIndent(res.Attestation, "  ", "  ")
	fmt.Fprintf(w, `keysvc is running (dev mode) on %s

Signed a VRP MCP transport assertion with key %q (kid %s):

  %s

Receipt attestation:
  %s

Dev API token (scopes: sign:* admin:keys admin:revoke audit:read), also in %s:
  %s

Try it yourself:
  export KEYSVC_TOKEN=$(cat %s)
  curl -s -H "Authorization: Bearer $KEYSVC_TOKEN" -H 'Content-Type: application/json' \
    -d '{"tool":"get_verified_stay_offer","arguments":{"checkIn":"2026-09-02","guests":2}}' \
    -o signed.json %s/v1/keys/%s/mcp-transport
  keysvc receipt build signed.json --property villaakerlyckan.se -o receipt.json
  keysvc verify receipt.json --jwks %s/v1/keys/%s/jwks.json

Press Ctrl-C to stop.
`, base, key, res.KID, res.JWS, att, tokenPath, token, tokenPath, base, key, base, key)
	return nil
}
