package main

import (
	"context"
	"crypto"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/software"
	"github.com/keysvc/keysvc/signer"
	"github.com/keysvc/keysvc/tlog"
	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

func init() { extraCommands = append(extraCommands, newTlogCmd) }

func newTlogCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tlog",
		Short: "Transparency log: run a log operator (serve), create its key (keygen), monitor a log (audit), measure it (bench)",
	}
	cmd.AddCommand(newTlogServeCmd(), newTlogKeygenCmd(), newTlogAuditCmd(), newTlogBenchCmd(), newTlogDrainCmd())
	return cmd
}

// logKeyFile is the operator's log key record in its data directory: what
// a backend needs to find the private half again, and the public key. It
// never holds plaintext key material (software: the KEK-sealed blob).
const logKeyFile = "log-key.json"

// logKeyName is the backend key name of a log key: the software backend
// binds the sealed blob to it (and to the key id), so a signing key's blob
// cannot be passed off as the log key's.
const logKeyName = "tlog"

type logKeyRecord struct {
	Backend string `json:"backend"`
	// KeyID names the key in the backend (software: the AAD; PKCS#11: the
	// CKA_LABEL suffix; AWS KMS: the alias suffix).
	KeyID  string      `json:"key_id"`
	Ref    string      `json:"ref"`
	Sealed string      `json:"sealed,omitempty"` // base64, software backend only
	JWK    tlogfmt.JWK `json:"public_jwk"`
	Origin string      `json:"origin"`
	VKey   string      `json:"vkey"`
}

// tlogKeyFlags locate the log key: the data directory, the software KEK
// and the HSM/KMS backends' own flags.
type tlogKeyFlags struct {
	dataDir, kekFile, origin string
}

func (f *tlogKeyFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.dataDir, "data-dir", envOr("KEYSVC_TLOG_DATA_DIR", "keysvc-tlog"), "operator data directory: the log key record, Tessera's POSIX log (log/), the STH archive (state.db) and the derived artifact-hash index (index/) (env KEYSVC_TLOG_DATA_DIR)")
	fs.StringVar(&f.kekFile, "kek-file", envOr("KEYSVC_TLOG_KEK_FILE", ""), "software backend key-encryption key of the log key, base64 of 32 bytes, mode 0600 (env KEYSVC_TLOG_KEK_FILE); default <data-dir>/kek")
	fs.StringVar(&f.origin, "origin", envOr("KEYSVC_TLOG_ORIGIN", ""), "log_id and checkpoint origin, e.g. log.example.com/vrp (env KEYSVC_TLOG_ORIGIN)")
	for _, bf := range backendFactories {
		bf.flags(fs)
	}
}

func (f *tlogKeyFlags) kek() string {
	if f.kekFile != "" {
		return f.kekFile
	}
	return filepath.Join(f.dataDir, "kek")
}

// openBackend opens the backend of the given kind: software with the KEK
// file, or one of the HSM/KMS backends configured by their flags.
func (f *tlogKeyFlags) openBackend(ctx context.Context, kind string, log *slog.Logger) (backends.Backend, error) {
	if kind == software.Kind {
		kek, err := software.ReadKEKFile(f.kek())
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("%w\ncreate the log key's key-encryption key with: head -c 32 /dev/urandom | base64 > %s && chmod 600 %s (and back it up)", err, f.kek(), f.kek())
		}
		if err != nil {
			return nil, err
		}
		defer clear(kek)
		return software.New(kek)
	}
	for _, bf := range backendFactories {
		if bf.kind != kind {
			continue
		}
		b, err := bf.open(ctx, log)
		if err != nil {
			return nil, fmt.Errorf("backend %s: %w", kind, err)
		}
		if b == nil {
			return nil, fmt.Errorf("backend %s is not configured (give its flags, e.g. --pkcs11-module or --awskms-region)", kind)
		}
		return b, nil
	}
	return nil, fmt.Errorf("unknown backend %q", kind)
}

// createLogKey makes a new Ed25519 log key in the backend and records it.
func (f *tlogKeyFlags) createLogKey(ctx context.Context, kind, keyID string, log *slog.Logger) (*logKeyRecord, error) {
	if f.origin == "" {
		return nil, errors.New("--origin is required")
	}
	path := filepath.Join(f.dataDir, logKeyFile)
	if _, err := os.Stat(path); err == nil {
		return nil, fmt.Errorf("%s exists: this data directory already has a log key", path)
	}
	b, err := f.openBackend(ctx, kind, log)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	h, err := b.CreateKey(ctx, backends.CreateRequest{KeyName: logKeyName, KID: keyID, Algorithm: signer.AlgEdDSA})
	if err != nil {
		return nil, err
	}
	key, err := tlogfmt.NewLogKey(f.origin, h.Public)
	if err != nil {
		return nil, err
	}
	vkey, err := key.VKey()
	if err != nil {
		return nil, err
	}
	rec := &logKeyRecord{Backend: kind, KeyID: keyID, Ref: h.Ref, JWK: key.JWK(), Origin: f.origin, VKey: vkey}
	if h.Sealed != nil {
		rec.Sealed = base64.StdEncoding.EncodeToString(h.Sealed)
	}
	body, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := ensureDir(f.dataDir); err != nil {
		return nil, err
	}
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if _, err := fh.Write(append(body, '\n')); err != nil {
		fh.Close()
		return nil, err
	}
	if err := fh.Sync(); err != nil {
		fh.Close()
		return nil, err
	}
	return rec, fh.Close()
}

// loadLogKey reads the log key record and loads its signer from the
// backend; the caller closes the backend.
func (f *tlogKeyFlags) loadLogKey(ctx context.Context, log *slog.Logger) (*logKeyRecord, crypto.Signer, backends.Backend, error) {
	body, err := os.ReadFile(filepath.Join(f.dataDir, logKeyFile))
	if err != nil {
		return nil, nil, nil, err
	}
	var rec logKeyRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return nil, nil, nil, fmt.Errorf("%s: %w", logKeyFile, err)
	}
	x, err := base64.RawURLEncoding.DecodeString(rec.JWK.X)
	if err != nil || len(x) != ed25519.PublicKeySize {
		return nil, nil, nil, fmt.Errorf("%s: public_jwk is not an Ed25519 key", logKeyFile)
	}
	h := backends.Handle{Ref: rec.Ref, Public: ed25519.PublicKey(x), KeyName: logKeyName}
	if rec.Sealed != "" {
		if h.Sealed, err = base64.StdEncoding.DecodeString(rec.Sealed); err != nil {
			return nil, nil, nil, fmt.Errorf("%s: sealed: %w", logKeyFile, err)
		}
	}
	b, err := f.openBackend(ctx, rec.Backend, log)
	if err != nil {
		return nil, nil, nil, err
	}
	s, err := b.Signer(ctx, rec.KeyID, h)
	if err != nil {
		b.Close()
		return nil, nil, nil, err
	}
	if f.origin != "" && f.origin != rec.Origin {
		b.Close()
		return nil, nil, nil, fmt.Errorf("--origin %q, but the log key was made for %q", f.origin, rec.Origin)
	}
	return &rec, s, b, nil
}

func newTlogKeygenCmd() *cobra.Command {
	f := &tlogKeyFlags{}
	var kind, keyID string
	cmd := &cobra.Command{
		Use:   "keygen",
		Short: "Create the log's Ed25519 key in a backend and record it in --data-dir",
		Long: `Create the log operator's Ed25519 key (separate from every signing key) in
a keysvc backend — software (sealed under --kek-file), pkcs11 or awskms —
and write its record (backend reference, public JWK, C2SP verifier key) to
<data-dir>/` + logKeyFile + `. Prints the record: publish its public_jwk and
vkey to verifiers and witnesses out of band.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
			if keyID == "" {
				keyID = "tlog-" + time.Now().UTC().Format("2006-01-02")
			}
			rec, err := f.createLogKey(cmd.Context(), kind, keyID, log)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(rec)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&kind, "backend", software.Kind, "backend holding the log key: software, pkcs11 or awskms")
	cmd.Flags().StringVar(&keyID, "key-id", "", "name of the key in the backend (default tlog-<today>)")
	return cmd
}

type tlogServeOptions struct {
	key                tlogKeyFlags
	listen             string
	dev                bool
	witnesses          []string
	witnessPolicy      string
	witnessesRequired  int
	witnessTimeout     time.Duration
	witnessFailOpen    bool
	checkpointInterval time.Duration
	batchMaxSize       uint
	batchMaxAge        time.Duration
	mmd                time.Duration
	submitTokenFile    string
}

func newTlogServeCmd() *cobra.Command {
	o := &tlogServeOptions{}
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run a transparency-log operator (VRP TL v0.1 endpoints, C2SP checkpoint and tiles)",
		Long: `Run a transparency-log operator on its own listener and data directory:
the VRP Transparency Log v0.1 endpoints under /.well-known/vrp/log/v0.1/
(add, add-batch, sth, proof, consistency, sth/archive, jwks.json, vkey),
the C2SP tlog-tiles resources (/checkpoint, /tile/...) and Prometheus
metrics (/metrics, keysvc_tlog_operator_*), on the Tessera engine
(POSIX driver, <data-dir>/log). The log key comes from <data-dir>/` + logKeyFile + `
(keysvc tlog keygen); with --dev a software key and KEK are created if
missing. Each checkpoint is sent to the --witness witnesses for
cosignatures. SIGTERM/SIGINT: stop taking entries, publish a checkpoint
covering every sequenced entry, exit.

Design: docs/adr/0012-transparency-log.md.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout())
		},
	}
	o.key.register(cmd)
	fs := cmd.Flags()
	fs.StringVar(&o.listen, "listen", envOr("KEYSVC_TLOG_LISTEN", "127.0.0.1:8090"), "listener of the log (env KEYSVC_TLOG_LISTEN)")
	fs.BoolVar(&o.dev, "dev", false, "development mode: create a KEK and a software log key (origin --origin, default localhost/vrp-log) if missing")
	fs.StringArrayVar(&o.witnesses, "witness", nil, `a C2SP tlog-witness witness: "<base URL> <verifier key>" (repeatable)`)
	fs.StringVar(&o.witnessPolicy, "witness-policy", "", "witness policy file (Sigsum policy format with cosignature/v1 vkeys, as Tessera reads it), instead of --witness")
	fs.IntVar(&o.witnessesRequired, "witnesses-required", 0, "cosignatures a checkpoint needs before it is published (default: every --witness)")
	fs.DurationVar(&o.witnessTimeout, "witness-timeout", tlog.DefaultWitnessTimeout, "limit on one round of witness cosigning")
	fs.BoolVar(&o.witnessFailOpen, "witness-fail-open", false, "publish a checkpoint without the required cosignatures when witnesses fail (proofs still use only cosigned trees)")
	fs.DurationVar(&o.checkpointInterval, "checkpoint-interval", tlog.DefaultCheckpointInterval, "how often a grown tree gets a new checkpoint and STH (at least 100ms)")
	fs.UintVar(&o.batchMaxSize, "batch-max-size", tlog.DefaultBatchMaxSize, "largest Tessera sequencing batch")
	fs.DurationVar(&o.batchMaxAge, "batch-max-age", tlog.DefaultBatchMaxAge, "longest an entry waits for its batch")
	fs.DurationVar(&o.mmd, "mmd", tlog.DefaultMMD, "maximum merge delay promised in every SEP")
	fs.StringVar(&o.submitTokenFile, "submit-token-file", envOr("KEYSVC_TLOG_SUBMIT_TOKEN_FILE", ""), "file of submitter bearer tokens, one a line, mode 0600: add and add-batch then need one (reads stay public); default: anyone may submit (env KEYSVC_TLOG_SUBMIT_TOKEN_FILE)")
	return cmd
}

func (o *tlogServeOptions) run(ctx context.Context, stdout io.Writer) error {
	log := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := ensureDir(o.key.dataDir); err != nil {
		return err
	}
	if o.dev {
		if o.key.origin == "" {
			o.key.origin = "localhost/vrp-log"
		}
		if _, err := os.Stat(o.key.kek()); errors.Is(err, os.ErrNotExist) {
			if err := software.CreateKEKFile(o.key.kek()); err != nil {
				return err
			}
			log.Warn("dev mode: created a new key-encryption key for the log key", "kek_file", o.key.kek())
		}
		if _, err := os.Stat(filepath.Join(o.key.dataDir, logKeyFile)); errors.Is(err, os.ErrNotExist) {
			if _, err := o.key.createLogKey(ctx, software.Kind, "tlog-dev", log); err != nil {
				return err
			}
			log.Warn("dev mode: created a software log key", "origin", o.key.origin)
		}
	}
	rec, s, b, err := o.key.loadLogKey(ctx, log)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%w\ncreate the log key with `keysvc tlog keygen --data-dir %s --origin ORIGIN`, or run with --dev on a development machine", err, o.key.dataDir)
	}
	if err != nil {
		return err
	}
	defer b.Close()
	cfg := tlog.Config{
		Dir: o.key.dataDir, Origin: rec.Origin, Signer: s, Logger: log,
		WitnessesRequired: o.witnessesRequired, WitnessTimeout: o.witnessTimeout, WitnessFailOpen: o.witnessFailOpen,
		CheckpointInterval: o.checkpointInterval, BatchMaxSize: o.batchMaxSize, BatchMaxAge: o.batchMaxAge, MMD: o.mmd,
	}
	for _, w := range o.witnesses {
		u, vk, ok := strings.Cut(strings.TrimSpace(w), " ")
		if !ok {
			return fmt.Errorf(`--witness %q: want "<base URL> <verifier key>"`, w)
		}
		cfg.Witnesses = append(cfg.Witnesses, tlog.Witness{URL: u, VKey: strings.TrimSpace(vk)})
	}
	if o.witnessPolicy != "" {
		if len(cfg.Witnesses) > 0 {
			return errors.New("give --witness or --witness-policy, not both")
		}
		if cfg.WitnessPolicy, err = os.ReadFile(o.witnessPolicy); err != nil {
			return err
		}
	}
	if o.submitTokenFile != "" {
		if cfg.SubmitTokenHashes, err = readSubmitTokens(o.submitTokenFile); err != nil {
			return err
		}
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	cfg.Registerer = reg
	op, err := tlog.New(ctx, cfg)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		op.Close(context.Background())
		return err
	}
	// /metrics is public on the log listener, like the log itself.
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/", op.Handler())
	srv := newHTTPServer(mux)
	srv.WriteTimeout = 60 * time.Second // an add-batch waits for sequencing
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	key := op.Key()
	json.NewEncoder(stdout).Encode(map[string]string{ //nolint:errcheck // best effort banner
		"listening": "http://" + ln.Addr().String(), "log_id": key.Origin, "kid": key.KID, "vkey": op.VKey(),
	})
	log.Info("tlog operator listening", "addr", ln.Addr().String(), "log_id", key.Origin, "kid", key.KID, "witnesses", len(cfg.Witnesses))
	select {
	case <-ctx.Done():
	case err = <-errc:
		log.Error("tlog listener failed", "err", err)
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv.Shutdown(shutCtx) //nolint:errcheck // closing anyway
	if cerr := op.Close(shutCtx); cerr != nil {
		log.Error("tlog shutdown", "err", cerr)
		if err == nil {
			err = cerr
		}
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// readSubmitTokens reads a submitter token file (one token a line, blank
// lines and #comments ignored; mode 0600 or stricter) and returns the
// tokens' SHA-256 hashes: the operator never keeps the tokens themselves.
func readSubmitTokens(path string) ([][32]byte, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("%s: submitter token file must not be readable by group or others (chmod 600)", path)
	}
	body, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out [][32]byte
	for _, line := range strings.Split(string(body), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		out = append(out, sha256.Sum256([]byte(line)))
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no submitter token", path)
	}
	return out, nil
}
