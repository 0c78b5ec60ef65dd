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
	// dirChecked: the caller checked the data directory (checkDataDir)
	// and reported its warning already.
	dirChecked bool
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
		return "postgres " + store.RedactConnString(c.PostgresURL)
	}
	return "sqlite " + c.SQLitePath
}

// open opens key history, migrating first when migrate is set.
func (f *storeFlags) open(ctx context.Context, migrate bool) (store.Store, error) {
	cfg := f.config()
	if cfg.PostgresURL == "" {
		if migrate {
			if err := os.MkdirAll(f.dataDir, 0o700); err != nil {
				return nil, err
			}
		} else if _, err := os.Stat(cfg.SQLitePath); errors.Is(err, os.ErrNotExist) {
			// Without migrating, nothing is created: a mistyped --data-dir
			// must not leave an empty directory or database behind.
			return nil, fmt.Errorf("no key history at %s: give the --data-dir (KEYSVC_DATA_DIR) that keysvc serve uses, or --postgres-url; a new one is created by `keysvc serve --dev` or `keysvc migrate`", cfg.SQLitePath)
		}
		if !f.dirChecked {
			warning, err := checkDataDir(f.dataDir)
			if err != nil {
				return nil, err
			}
			if warning != "" {
				fmt.Fprintln(os.Stderr, "keysvc: warning:", warning)
			}
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
		return checkToken(strings.TrimSpace(t), "KEYSVC_TOKEN")
	}
	path := f.tokenFile
	if path == "" {
		path = filepath.Join(f.dataDir, devTokenFile)
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) && f.tokenFile == "" {
		return "", fmt.Errorf("no token: set KEYSVC_TOKEN or --token-file, or start `keysvc serve --dev --data-dir %s`, which writes its dev token to %s (no such file now)", f.dataDir, path)
	}
	if err != nil {
		return "", err
	}
	return checkToken(strings.TrimSpace(string(b)), path)
}

// checkToken refuses a token given with its "Bearer " prefix or empty:
// the client adds the prefix itself.
func checkToken(tok, from string) (string, error) {
	if scheme, _, ok := strings.Cut(tok, " "); ok && strings.EqualFold(scheme, "Bearer") {
		return "", fmt.Errorf("the token in %s starts with %q: give the token alone (ksv_...); keysvc sends the Authorization: Bearer header itself", from, scheme+" ")
	}
	if tok == "" {
		return "", fmt.Errorf("the token in %s is empty", from)
	}
	return tok, nil
}

func ensureDir(d string) error {
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	_, err := checkDataDir(d)
	return err
}

// checkDataDir refuses a data directory that the group or others may
// write to: they could replace the SQLite key history, the default KEK or
// the dev token (or plant them before the first start); the sticky bit
// does not prevent planting. keysvc creates it 0700. Read or search access
// for the group or others is returned as a warning (the files inside are
// 0600, but their names and sizes show).
func checkDataDir(dir string) (warning string, err error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return "", err
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("data directory %s is not a directory", dir)
	}
	mode := fi.Mode()
	perm := mode.Perm()
	if mode&os.ModeSticky != 0 {
		perm |= 0o1000
	}
	if mode.Perm()&0o022 != 0 {
		return "", fmt.Errorf("data directory %s has mode %04o: the group or others may write to it (and replace the key history, KEK or dev token); chmod 700 %s", dir, perm, dir)
	}
	if mode.Perm()&0o055 != 0 {
		return fmt.Sprintf("data directory %s has mode %04o: the group or others may list it; chmod 700 %s", dir, perm, dir), nil
	}
	return "", nil
}
