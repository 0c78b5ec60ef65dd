package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/store"
)

// envOr returns $name when set and non-empty, else def. Every flag has a
// KEYSVC_* environment variable so containers need no command-line secrets.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// storeFlags are shared by every command that opens key history directly.
type storeFlags struct {
	postgresURL string
	dataDir     string
}

func (f *storeFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.postgresURL, "postgres-url", "", "PostgreSQL URL for key history (env KEYSVC_POSTGRES_URL); empty: embedded SQLite in --data-dir")
	cmd.Flags().StringVar(&f.dataDir, "data-dir", envOr("KEYSVC_DATA_DIR", "keysvc-data"), "directory for the SQLite database, the dev KEK and the dev token (env KEYSVC_DATA_DIR)")
}

func (f *storeFlags) config() store.Config {
	url := f.postgresURL
	if url == "" {
		url = os.Getenv("KEYSVC_POSTGRES_URL")
	}
	return store.Config{PostgresURL: url, SQLitePath: filepath.Join(f.dataDir, "keysvc.db")}
}

func (f *storeFlags) describe() string {
	c := f.config()
	if c.PostgresURL != "" {
		return "postgres " + redactURL(c.PostgresURL)
	}
	return "sqlite " + c.SQLitePath
}

// open opens key history, migrating first when migrate is set.
func (f *storeFlags) open(ctx context.Context, migrate bool) (store.Store, error) {
	cfg := f.config()
	if cfg.PostgresURL == "" {
		if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
			return nil, err
		}
	}
	if migrate {
		if _, err := store.Migrate(ctx, cfg); err != nil {
			return nil, fmt.Errorf("migrate %s: %w", f.describe(), err)
		}
	}
	s, err := store.Open(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", f.describe(), err)
	}
	return s, nil
}

// withStore wraps a subcommand body with key history opened (not migrated)
// and closed afterwards.
func (f *storeFlags) withStore(run func(cmd *cobra.Command, args []string, st store.Store) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		st, err := f.open(cmd.Context(), false)
		if err != nil {
			return err
		}
		defer st.Close()
		return run(cmd, args, st)
	}
}

// redactURL hides a password in a database URL.
func redactURL(u string) string {
	at := strings.LastIndex(u, "@")
	scheme := strings.Index(u, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return u
	}
	creds := u[scheme+3 : at]
	if user, _, ok := strings.Cut(creds, ":"); ok {
		return u[:scheme+3] + user + ":REDACTED" + u[at:]
	}
	return u
}

// clientFlags are shared by the admin commands that call the HTTP API.
type clientFlags struct {
	server    string
	tokenFile string
	dataDir   string
}

func (f *clientFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.server, "server", envOr("KEYSVC_SERVER", "http://127.0.0.1:8080"), "keysvc admin API base URL (env KEYSVC_SERVER)")
	cmd.PersistentFlags().StringVar(&f.tokenFile, "token-file", envOr("KEYSVC_TOKEN_FILE", ""), "file holding the bearer token (env KEYSVC_TOKEN_FILE; or set KEYSVC_TOKEN); default: the dev token in --data-dir")
	cmd.PersistentFlags().StringVar(&f.dataDir, "data-dir", envOr("KEYSVC_DATA_DIR", "keysvc-data"), "data directory whose dev-token is used when no token is given (env KEYSVC_DATA_DIR)")
}

// token finds the bearer token: $KEYSVC_TOKEN, --token-file, or the dev
// token file. Tokens are never taken from a flag value, which would show in
// process listings.
func (f *clientFlags) token() (string, error) {
	if t := os.Getenv("KEYSVC_TOKEN"); t != "" {
		return strings.TrimSpace(t), nil
	}
	path := f.tokenFile
	if path == "" {
		path = filepath.Join(f.dataDir, devTokenFile)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && f.tokenFile == "" {
		return "", fmt.Errorf("no token: set KEYSVC_TOKEN or --token-file (no dev token at %s)", path)
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

func ensureDir(d string) error { return os.MkdirAll(d, 0o700) }
