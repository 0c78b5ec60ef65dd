package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/anchor"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
)

// anchorFlags configure key-history anchoring on serve (issue 12 item 5,
// ADR 0016).
type anchorFlags struct {
	keyFile    string
	checkEvery time.Duration
}

func (f *anchorFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.keyFile, "anchor-key-file", "", "event key (keysvc anchor keygen): anchor every key-history change in the transparency log (--tlog-url, or the embedded log) and check key history against it on every reload; a version the log does not back is not published and never signs. With --dev, created when missing")
	fs.DurationVar(&f.checkEvery, "anchor-check-interval", 30*time.Second, "how often the transparency log is asked again for the key-history markers that must stay absent (rolled-back state, deleted versions)")
}

func (f *anchorFlags) validate() error {
	if f.checkEvery < 100*time.Millisecond {
		return errors.New("--anchor-check-interval must be at least 100ms")
	}
	return nil
}

// start loads (in dev mode: creates) the event key and makes the Anchor;
// nil without --anchor-key-file.
func (f *anchorFlags) start(ctx context.Context, st store.Store, tl *tlogRuntime, log *slog.Logger, dev bool) (*anchor.Anchor, error) {
	if f.keyFile == "" {
		return nil, nil
	}
	if tl == nil || tl.client == nil {
		return nil, errors.New("--anchor-key-file needs a transparency log (--tlog-url, or --dev for the embedded one)")
	}
	key, err := anchor.LoadKeyFile(f.keyFile)
	if errors.Is(err, os.ErrNotExist) && dev {
		if key, err = anchor.GenerateKeyFile(f.keyFile); err == nil {
			log.Warn("dev mode: created an event key for key-history anchoring", "file", f.keyFile, "event_key", key.KID())
		}
	}
	if err != nil {
		return nil, err
	}
	a, err := anchor.New(anchor.Config{Key: key, Logs: tl.logs, LogKeys: tl.logKeys, Recorder: tl.client, Store: st, Logger: log})
	if err != nil {
		return nil, err
	}
	if err := a.Start(ctx); err != nil {
		return nil, err
	}
	log.Info("key history anchored in the transparency log", "event_key", key.KID(), "logs", tl.client.LogURLs())
	return a, nil
}

func init() { extraCommands = append(extraCommands, newAnchorCmd) }

func newAnchorCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "anchor", Short: "Key-history anchoring in the transparency log (ADR 0016)"}
	var out string
	keygen := &cobra.Command{
		Use:   "keygen --out FILE",
		Short: "Create an event key (Ed25519, a private JWK, mode 0600) and print its public JWK",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if out == "" {
				return errors.New("--out is required")
			}
			k, err := anchor.GenerateKeyFile(out)
			if err != nil {
				return err
			}
			pub, err := k.PublicJWK()
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), string(pub))
			return nil
		},
	}
	keygen.Flags().StringVar(&out, "out", "", "file to create (refuses to overwrite)")

	checkStore := &storeFlags{}
	checkAnchor := &auditAnchorFlags{}
	check := &cobra.Command{
		Use:   "check --anchor-key-file FILE --tlog-url URL",
		Short: "Check key history (keys and versions) against the transparency log as a fresh replica would; exit 1 naming what the log does not back",
		Args:  cobra.NoArgs,
		RunE: checkStore.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
			a, err := checkAnchor.anchor(st)
			if err != nil {
				return err
			}
			h, err := st.ReadHistory(cmd.Context())
			if err != nil {
				return err
			}
			v := a.CheckAll(cmd.Context(), h)
			w := cmd.OutOrStdout()
			var reasons []string
			for _, r := range v.Keys {
				reasons = append(reasons, r)
			}
			for _, r := range v.Versions {
				reasons = append(reasons, r)
			}
			sort.Strings(reasons)
			for _, r := range reasons {
				fmt.Fprintln(w, "NOT BACKED: "+r)
			}
			if len(reasons) > 0 {
				return exitError{code: 1}
			}
			n := 0
			for _, vs := range h.Versions {
				n += len(vs)
			}
			fmt.Fprintf(w, "key history backed by the transparency log: %d keys, %d versions\n", len(h.Keys), n)
			return nil
		}),
	}
	checkStore.register(check)
	checkAnchor.register(check)
	cmd.AddCommand(keygen, check)
	return cmd
}

// auditAnchorFlags are audit verify's flags for checking the chain against
// the transparency log.
type auditAnchorFlags struct {
	keyFile string
	urls    []string
}

func (f *auditAnchorFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.keyFile, "anchor-key-file", "", "the node's event key: also check every row against the heads anchored in the transparency log (--tlog-url)")
	cmd.Flags().StringSliceVar(&f.urls, "tlog-url", nil, "transparency log(s) the node anchors key history in (repeatable)")
}

// anchor makes a check-only Anchor over st and the logs.
func (f *auditAnchorFlags) anchor(st store.Store) (*anchor.Anchor, error) {
	if f.keyFile == "" || len(f.urls) == 0 {
		return nil, errors.New("--anchor-key-file and --tlog-url are required")
	}
	key, err := anchor.LoadKeyFile(f.keyFile)
	if err != nil {
		return nil, err
	}
	var logs []tlogclient.Log
	for _, u := range f.urls {
		l, err := tlogclient.NewHTTPLog(u)
		if err != nil {
			return nil, err
		}
		logs = append(logs, l)
	}
	return anchor.New(anchor.Config{Key: key, Logs: logs, Store: st})
}

// verifyAnchored checks rows (an intact chain) against the log: every row
// whose seq the log anchors must have the anchored hash, and the log must
// anchor no row after the last. It prints the first divergence and returns
// exitError{1}, or a summary.
func (f *auditAnchorFlags) verifyAnchored(ctx context.Context, w io.Writer, st store.Store, rows []store.AuditEvent) error {
	if f.keyFile == "" {
		return nil
	}
	a, err := f.anchor(st)
	if err != nil {
		return err
	}
	res, err := a.VerifyAudit(ctx, rows)
	if err != nil {
		return err
	}
	if res.Divergence != "" {
		fmt.Fprintf(w, "audit chain DIVERGES from the transparency log at row %d: %s\n", res.FirstSeq, res.Divergence)
		return exitError{code: 1}
	}
	fmt.Fprintf(w, "audit chain anchored: %d of %d rows anchored in the transparency log", res.Anchored, len(rows))
	if res.Unanchored > 0 {
		fmt.Fprintf(w, " (%d written without the event key, e.g. by an offline CLI command: not anchored)", res.Unanchored)
	}
	fmt.Fprintln(w)
	return nil
}
