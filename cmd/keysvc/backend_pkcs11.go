package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/pkcs11"
)

// The PKCS#11 backend: serve gets its flags through backendFactories and
// enables it when --pkcs11-module is set; `keysvc backend check` and
// `keysvc backend orphans` take the same flags.
func init() {
	f := &pkcs11Flags{}
	backendFactories = append(backendFactories, backendFactory{
		kind:  pkcs11.Kind,
		flags: f.register,
		open: func(ctx context.Context, log *slog.Logger) (backends.Backend, error) {
			if f.module == "" {
				return nil, nil
			}
			b, err := f.open(ctx, log)
			if err != nil {
				return nil, err
			}
			return b, nil
		},
		check: func() error {
			if f.module == "" {
				return nil
			}
			if fi, err := os.Stat(f.module); err != nil {
				return fmt.Errorf("--pkcs11-module: %w", err)
			} else if !fi.Mode().IsRegular() {
				return fmt.Errorf("--pkcs11-module %s is not a file (the HSM vendor's PKCS#11 shared library)", f.module)
			}
			_, err := f.config(nil)
			return err
		},
	})
	extraCommands = append(extraCommands, newBackendCmd)
}

// pinEnv holds the user PIN when no PIN file is given. The PIN is never a
// flag: flag values show in process listings.
const pinEnv = "KEYSVC_PKCS11_PIN"

type pkcs11Flags struct {
	module, tokenLabel, pinFile, labelPrefix string
	sessions                                 int
	timeout                                  time.Duration
	envErr                                   error // an unparsable KEYSVC_PKCS11_* value
}

func (f *pkcs11Flags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.module, "pkcs11-module", envOr("KEYSVC_PKCS11_MODULE", ""), "PKCS#11 module (the HSM vendor's shared library, e.g. /usr/lib/softhsm/libsofthsm2.so); setting it enables the pkcs11 backend (env KEYSVC_PKCS11_MODULE)")
	fs.StringVar(&f.tokenLabel, "pkcs11-token-label", envOr("KEYSVC_PKCS11_TOKEN_LABEL", ""), "label of the PKCS#11 token holding the keys; the slot is found by it (env KEYSVC_PKCS11_TOKEN_LABEL)")
	fs.StringVar(&f.pinFile, "pkcs11-pin-file", envOr("KEYSVC_PKCS11_PIN_FILE", ""), "file holding the token's user PIN, mode 0600 (env KEYSVC_PKCS11_PIN_FILE); without it the PIN is read from $"+pinEnv)
	fs.StringVar(&f.labelPrefix, "pkcs11-key-label-prefix", envOr("KEYSVC_PKCS11_KEY_LABEL_PREFIX", ""), "prefix of the CKA_LABEL of keysvc's key objects (label = prefix + kid); give each deployment sharing a token its own (env KEYSVC_PKCS11_KEY_LABEL_PREFIX)")
	sessions := pkcs11.DefaultSessions
	if v := os.Getenv("KEYSVC_PKCS11_SESSIONS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			f.envErr = fmt.Errorf("KEYSVC_PKCS11_SESSIONS=%q: want a positive number", v)
		} else {
			sessions = n
		}
	}
	timeout := pkcs11.DefaultTimeout
	if v := os.Getenv("KEYSVC_PKCS11_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			f.envErr = fmt.Errorf("KEYSVC_PKCS11_TIMEOUT=%q: want a positive duration such as 5s", v)
		} else {
			timeout = d
		}
	}
	fs.IntVar(&f.sessions, "pkcs11-sessions", sessions, "size of the pool of logged-in PKCS#11 sessions (env KEYSVC_PKCS11_SESSIONS)")
	fs.DurationVar(&f.timeout, "pkcs11-timeout", timeout, "limit on each PKCS#11 call, waiting for a free session included; a token that does not answer in time gives backend_unavailable (env KEYSVC_PKCS11_TIMEOUT)")
}

// config builds the backend configuration, reading the PIN from the PIN
// file or $KEYSVC_PKCS11_PIN (exactly one of them).
func (f *pkcs11Flags) config(log *slog.Logger) (pkcs11.Config, error) {
	if f.envErr != nil {
		return pkcs11.Config{}, f.envErr
	}
	if f.module == "" {
		return pkcs11.Config{}, errors.New("--pkcs11-module (KEYSVC_PKCS11_MODULE) is required")
	}
	if f.tokenLabel == "" {
		return pkcs11.Config{}, errors.New("--pkcs11-token-label (KEYSVC_PKCS11_TOKEN_LABEL) is required with --pkcs11-module")
	}
	if f.sessions < 1 || f.timeout <= 0 {
		return pkcs11.Config{}, errors.New("--pkcs11-sessions and --pkcs11-timeout must be positive")
	}
	envPIN := os.Getenv(pinEnv)
	var pin string
	switch {
	case f.pinFile != "" && envPIN != "":
		return pkcs11.Config{}, fmt.Errorf("both --pkcs11-pin-file and $%s are set; use one", pinEnv)
	case f.pinFile != "":
		p, err := pkcs11.ReadPINFile(f.pinFile)
		if err != nil {
			return pkcs11.Config{}, err
		}
		pin = p
	case envPIN != "":
		pin = envPIN
	default:
		return pkcs11.Config{}, fmt.Errorf("no PKCS#11 user PIN: give --pkcs11-pin-file (KEYSVC_PKCS11_PIN_FILE) or set $%s", pinEnv)
	}
	return pkcs11.Config{
		ModulePath: f.module, TokenLabel: f.tokenLabel, PIN: pin, KeyLabelPrefix: f.labelPrefix,
		Sessions: f.sessions, Timeout: f.timeout, Logger: log,
	}, nil
}

func (f *pkcs11Flags) open(ctx context.Context, log *slog.Logger) (*pkcs11.Backend, error) {
	cfg, err := f.config(log)
	if err != nil {
		return nil, err
	}
	return pkcs11.Open(ctx, cfg)
}

func newBackendCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "backend", Short: "Inspect key backends (PKCS#11 HSM)"}
	cmd.AddCommand(newBackendCheckCmd(), newBackendOrphansCmd())
	return cmd
}

func newBackendCheckCmd() *cobra.Command {
	f := &pkcs11Flags{}
	cmd := &cobra.Command{
		Use:   "check",
		Short: "Describe the PKCS#11 token and test Ed25519 and ES256 signing in it",
		Long: `Log in to the PKCS#11 token named by the --pkcs11-* flags, print the token
(label, manufacturer, model, serial) and the mechanisms it offers, and test
each algorithm keysvc signs with: generate a session key pair (CKA_TOKEN=false,
nothing stays in the token), sign, verify with Go's crypto, destroy it.

Exit status 1 when the token cannot be used: the module does not load, the
token is missing, the PIN is refused, or neither Ed25519 nor ES256 works.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return backendCheck(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	f.register(cmd.Flags())
	return cmd
}

func backendCheck(ctx context.Context, w io.Writer, f *pkcs11Flags) error {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	b, err := f.open(ctx, log)
	if err != nil {
		return err
	}
	defer b.Close()
	r, err := b.Check(ctx)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "PKCS#11 module: %s\n  %s, %s %s (Cryptoki %s)\n", r.Module.Path, r.Module.Manufacturer, r.Module.Description, r.Module.LibraryVersion, r.Module.CryptokiVersion)
	fmt.Fprintf(w, "Token:\n  label:        %s\n  manufacturer: %s\n  model:        %s\n  serial:       %s\n  slot:         %d\n  hardware:     %s, firmware %s\n",
		r.Token.Label, r.Token.Manufacturer, r.Token.Model, r.Token.Serial, r.Token.Slot, r.Token.HardwareVersion, r.Token.FirmwareVersion)
	fmt.Fprintf(w, "Mechanisms (%d):\n", len(r.Mechanisms))
	for _, m := range r.Mechanisms {
		sizes := ""
		if m.MaxKeySize > 0 {
			sizes = fmt.Sprintf(" keySize={%d,%d}", m.MinKeySize, m.MaxKeySize)
		}
		name := m.Name
		if strings.HasPrefix(name, "0x") {
			name = "(vendor or unnamed)"
		}
		fmt.Fprintf(w, "  0x%08X %-32s %s%s\n", m.ID, name, m.FlagNames(), sizes)
	}
	usable := 0
	for _, a := range r.Algorithms {
		name := a.Curve
		if a.Alg == "ES256" {
			name = "ES256"
		}
		if a.Err != nil {
			fmt.Fprintf(w, "%s: FAILED: %v\n", name, a.Err)
			continue
		}
		usable++
		fmt.Fprintf(w, "%s: ok\n", name)
	}
	if usable == 0 {
		fmt.Fprintln(w, "The token cannot sign for keysvc.")
		return exitError{code: 1}
	}
	return nil
}

func newBackendOrphansCmd() *cobra.Command {
	f := &pkcs11Flags{}
	st := &storeFlags{}
	cmd := &cobra.Command{
		Use:   "orphans",
		Short: "List PKCS#11 key objects that key history does not know",
		Long: `List the labels of key objects in the PKCS#11 token that carry the key label
prefix but whose kid is not in key history. A key pair is generated in the
token inside the key-history transaction; a process that dies before the
commit leaves such objects behind. Nothing is deleted: after checking, remove
them yourself, e.g.

  pkcs11-tool --module MODULE --token-label LABEL --login \
    --delete-object --type privkey --label LABEL-OF-ORPHAN
  (and again with --type pubkey)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 2*time.Minute)
			defer cancel()
			s, err := st.open(ctx, false)
			if err != nil {
				return err
			}
			defer s.Close()
			keys, err := s.ListKeys(ctx)
			if err != nil {
				return err
			}
			known := map[string]bool{}
			for _, k := range keys {
				versions, err := s.ListVersions(ctx, k.Name)
				if err != nil {
					return err
				}
				for _, v := range versions {
					known[v.KID] = true
				}
			}
			log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
			b, err := f.open(ctx, log)
			if err != nil {
				return err
			}
			defer b.Close()
			orphans, err := b.Orphans(ctx, known)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if len(orphans) == 0 {
				fmt.Fprintf(w, "no orphaned key objects in token %s (%d kids in key history)\n", f.tokenLabel, len(known))
				return nil
			}
			fmt.Fprintln(w, strings.Join(orphans, "\n"))
			fmt.Fprintf(os.Stderr, "%d orphaned key object label(s) in token %s; nothing was deleted\n", len(orphans), f.tokenLabel)
			return nil
		},
	}
	f.register(cmd.Flags())
	st.register(cmd)
	return cmd
}
