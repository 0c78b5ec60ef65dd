package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/user"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/keysvc/keysvc/backends"
	"github.com/keysvc/keysvc/backends/awskms"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
)

// The AWS KMS backend: serve gets its flags through backendFactories and
// enables it when --awskms-region is set. `keysvc awskms schedule-deletion`
// and `keysvc awskms disable` act on one key version's KMS key, found in
// key history. Credentials come from the standard AWS chain (environment,
// shared files, SSO, web identity, ECS/EC2 roles), never from flags.
func init() {
	f := &awskmsFlags{}
	backendFactories = append(backendFactories, backendFactory{
		kind:  awskms.Kind,
		flags: f.register,
		open: func(ctx context.Context, log *slog.Logger) (backends.Backend, error) {
			if f.region == "" {
				return nil, nil
			}
			b, err := f.open(ctx, log)
			if err != nil {
				return nil, err
			}
			log.Info("awskms backend enabled", "region", f.region, "endpoint", f.endpoint,
				"max_concurrency", f.maxConcurrency, "timeout", f.timeout.String(), "alias_prefix", f.aliasPrefix)
			return b, nil
		},
	})
	extraCommands = append(extraCommands, newAWSKMSCmd)
}

type awskmsFlags struct {
	region, endpoint, aliasPrefix string
	maxConcurrency, maxAttempts   int
	timeout                       time.Duration
	envErr                        error // an unparsable KEYSVC_AWSKMS_* value
}

func (f *awskmsFlags) envInt(name string, def int) int {
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 {
		f.envErr = fmt.Errorf("%s=%q: want a positive number", name, v)
		return def
	}
	return n
}

func (f *awskmsFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.region, "awskms-region", envOr("KEYSVC_AWSKMS_REGION", ""), "AWS region of the KMS keys; setting it enables the awskms backend (env KEYSVC_AWSKMS_REGION). Credentials: the standard AWS chain")
	fs.StringVar(&f.endpoint, "awskms-endpoint", envOr("KEYSVC_AWSKMS_ENDPOINT", ""), "KMS endpoint override, e.g. a VPC endpoint or an emulator at http://127.0.0.1:4599 (env KEYSVC_AWSKMS_ENDPOINT)")
	fs.StringVar(&f.aliasPrefix, "awskms-alias-prefix", envOr("KEYSVC_AWSKMS_ALIAS_PREFIX", awskms.DefaultAliasPrefix), "prefix of each key version's KMS alias (alias = prefix + kid with dots as underscores); give each deployment sharing an account and region its own (env KEYSVC_AWSKMS_ALIAS_PREFIX)")
	fs.IntVar(&f.maxConcurrency, "awskms-max-concurrency", f.envInt("KEYSVC_AWSKMS_MAX_CONCURRENCY", awskms.DefaultMaxConcurrency), "most KMS calls in flight; more wait for a slot (KMS's default ECC Sign quota is 1,000 requests/s per account and region) (env KEYSVC_AWSKMS_MAX_CONCURRENCY)")
	fs.IntVar(&f.maxAttempts, "awskms-max-attempts", f.envInt("KEYSVC_AWSKMS_MAX_ATTEMPTS", awskms.DefaultMaxAttempts), "attempts per KMS call, retried with jittered exponential backoff on throttling and transient errors (env KEYSVC_AWSKMS_MAX_ATTEMPTS)")
	timeout := awskms.DefaultTimeout
	if v := os.Getenv("KEYSVC_AWSKMS_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			f.envErr = fmt.Errorf("KEYSVC_AWSKMS_TIMEOUT=%q: want a positive duration such as 5s", v)
		} else {
			timeout = d
		}
	}
	fs.DurationVar(&f.timeout, "awskms-timeout", timeout, "limit on each KMS call with its retries, and separately on waiting for a free slot; then backend_unavailable / backend_throttled (env KEYSVC_AWSKMS_TIMEOUT)")
}

func (f *awskmsFlags) open(ctx context.Context, log *slog.Logger) (*awskms.Backend, error) {
	if f.envErr != nil {
		return nil, f.envErr
	}
	if f.region == "" {
		return nil, errors.New("--awskms-region (KEYSVC_AWSKMS_REGION) is required")
	}
	if f.maxConcurrency < 1 || f.maxAttempts < 1 || f.timeout <= 0 {
		return nil, errors.New("--awskms-max-concurrency, --awskms-max-attempts and --awskms-timeout must be positive")
	}
	return awskms.New(ctx, awskms.Config{
		Region: f.region, Endpoint: f.endpoint, AliasPrefix: f.aliasPrefix,
		MaxConcurrency: f.maxConcurrency, MaxAttempts: f.maxAttempts, Timeout: f.timeout, Logger: log,
	})
}

func newAWSKMSCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "awskms",
		Short: "Officer commands for key versions in AWS KMS (schedule deletion of key material, disable)",
	}
	cmd.AddCommand(newAWSKMSScheduleDeletionCmd(), newAWSKMSDisableCmd())
	return cmd
}

// awskmsVersionCmd holds what both officer commands share: key history,
// the KMS endpoint, and the audit actor and reason.
type awskmsVersionCmd struct {
	store            storeFlags
	anchor           cliAnchorFlags
	unanchored       bool
	key              store.Key // the version's key, as load read (and checked) it
	region, endpoint string
	actor, reason    string
}

func (c *awskmsVersionCmd) register(cmd *cobra.Command) {
	c.store.register(cmd)
	c.anchor.register(cmd, false)
	cmd.Flags().BoolVar(&c.unanchored, "unanchored", false, "key history is not anchored in a transparency log (serve runs without --anchor-key-file): act on the version as stored, unchecked")
	fs := cmd.Flags()
	fs.StringVar(&c.region, "region", envOr("KEYSVC_AWSKMS_REGION", ""), "AWS region (env KEYSVC_AWSKMS_REGION); default: the region in the version's backend reference")
	fs.StringVar(&c.endpoint, "endpoint", envOr("KEYSVC_AWSKMS_ENDPOINT", ""), "KMS endpoint override (env KEYSVC_AWSKMS_ENDPOINT)")
	fs.StringVar(&c.actor, "actor", defaultActor(), "who is acting, for the audit trail")
	fs.StringVar(&c.reason, "reason", "", "why (recorded in the audit trail; required)")
}

func defaultActor() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username + " (keysvc awskms)"
	}
	return "keysvc awskms"
}

// load opens key history and returns it with the awskms version named kid
// and a backend for its region.
func (c *awskmsVersionCmd) load(ctx context.Context, kid string) (store.Store, store.KeyVersion, *awskms.Backend, error) {
	if strings.TrimSpace(c.reason) == "" {
		return nil, store.KeyVersion{}, nil, errors.New("--reason is required: it is recorded in the audit trail")
	}
	raw, err := c.store.open(ctx, false)
	if err != nil {
		return nil, store.KeyVersion{}, nil, err
	}
	// On anchored key history the version and its key are checked against
	// the log before KMS is asked to act on its backend reference, and the
	// audit row is anchored (ADR 0050): a database writer could otherwise
	// point a retired version at the active version's KMS key.
	// Whether history is anchored is the operator's statement, not the
	// database's: a writer can empty anchor_events (an attack review,
	// session 47).
	if c.anchor.keyFile == "" {
		anchored, err := anchoredHistory(ctx, raw)
		if err != nil {
			raw.Close()
			return nil, store.KeyVersion{}, nil, err
		}
		switch {
		case anchored:
			raw.Close()
			return nil, store.KeyVersion{}, nil, errors.New("key history is anchored in a transparency log (ADR 0016): give --anchor-key-file and --tlog-url (or KEYSVC_ANCHOR_KEY_FILE and KEYSVC_TLOG_URL), as serve runs with, so that the version's backend reference and its key's policy are checked against the log before KMS acts on them (ADR 0050)")
		case !c.unanchored:
			raw.Close()
			return nil, store.KeyVersion{}, nil, errors.New("give --anchor-key-file and --tlog-url (or KEYSVC_ANCHOR_KEY_FILE and KEYSVC_TLOG_URL) as serve runs with, so that the version's backend reference and its key's policy are checked against the transparency log before KMS acts on them (ADR 0050); or --unanchored when serve runs without key-history anchoring")
		}
	}
	st := raw
	if c.anchor.keyFile != "" {
		if st, err = c.anchor.wrap(ctx, raw, false, io.Discard); err != nil {
			raw.Close()
			return nil, store.KeyVersion{}, nil, err
		}
	}
	v, err := st.GetVersion(ctx, kid)
	if errors.Is(err, store.ErrNotFound) {
		st.Close()
		return nil, store.KeyVersion{}, nil, fmt.Errorf("no key version %q in %s", kid, c.store.describe())
	}
	if err != nil {
		st.Close()
		return nil, store.KeyVersion{}, nil, err
	}
	if c.anchor.anchor != nil {
		if c.key, v, err = c.anchor.checkedVersion(ctx, st, kid); err != nil {
			st.Close()
			return nil, store.KeyVersion{}, nil, err
		}
	} else if c.key, err = st.GetKey(ctx, v.KeyName); err != nil {
		st.Close()
		return nil, store.KeyVersion{}, nil, err
	}
	ref, err := awskms.ParseRef(v.BackendRef)
	if err != nil {
		st.Close()
		return nil, store.KeyVersion{}, nil, fmt.Errorf("%s is not an AWS KMS key version (backend reference %q)", kid, v.BackendRef)
	}
	region := c.region
	if region == "" {
		region = ref.Region
	}
	b, err := awskms.New(ctx, awskms.Config{Region: region, Endpoint: c.endpoint, MaxAttempts: 3, Timeout: 15 * time.Second})
	if err != nil {
		st.Close()
		return nil, store.KeyVersion{}, nil, err
	}
	return st, v, b, nil
}

func (c *awskmsVersionCmd) audit(ctx context.Context, st store.Store, v store.KeyVersion, action string, details map[string]any) error {
	raw, err := json.Marshal(details)
	if err != nil {
		return err
	}
	return st.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.AppendAudit(ctx, store.AuditEvent{At: store.Now(), Actor: c.actor, Action: action,
			KeyName: v.KeyName, KID: v.KID, Reason: c.reason, Details: raw})
		return err
	})
}

func newAWSKMSScheduleDeletionCmd() *cobra.Command {
	c := &awskmsVersionCmd{}
	var days int
	var disable bool
	cmd := &cobra.Command{
		Use:   "schedule-deletion KID --pending-days N --reason TEXT",
		Short: "Schedule destruction of a retired or revoked version's KMS key material (7-30 days, cancellable in AWS until then); prefer 'keysvc keys destroy'",
		Long: `Schedule deletion of the KMS key that holds the private half of key version
KID, after --pending-days (7 to 30; KMS's limits). Until that date an AWS
administrator can cancel it (aws kms cancel-key-deletion). Only retired and
revoked versions qualify: a version that is active or pending still signs.

'keysvc keys destroy KID --reason TEXT [--pending-days N]' is the normal
path: it goes through the admin API, honours the key's two-person rule and
records the destruction in key history (material_destroyed_at). This
command goes to KMS directly and only appends an audit row; it refuses
versions of keys whose policy has the two-person rule, which it would
bypass.

Historical public keys stay published: the key history (and the JWKS for a
retired version within retention) keeps the version's public key, so
receipts it signed remain verifiable. Only new signatures become impossible.

The action is recorded in the audit trail (key history is opened directly,
like 'keysvc audit'). Give --anchor-key-file and --tlog-url as serve runs
with: the version, its backend reference and its key's policy are then
checked against the transparency log first, and KMS acts on the version as
checked (ADR 0050); --unanchored only when serve runs without key-history
anchoring.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			if days < 7 || days > 30 {
				return fmt.Errorf("--pending-days must be 7 to 30 (KMS's limits), got %d", days)
			}
			st, v, b, err := c.load(ctx, args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			if v.State != store.StateRetired && v.State != store.StateRevoked {
				return fmt.Errorf("%s is %s: it still signs or is about to; rotate (or revoke) first, then schedule deletion of its key material", v.KID, v.State)
			}
			if err := refuseUnderTwoPersonRule(c.key, v); err != nil {
				return err
			}
			w := cmd.ErrOrStderr()
			fmt.Fprintf(w, "WARNING: scheduling destruction of the private key material of %s (%s) in AWS KMS.\n", v.KID, v.BackendRef)
			fmt.Fprintf(w, "WARNING: historical public keys stay published from key history: receipts signed by %s remain verifiable, but it can never sign again once deleted.\n", v.KID)
			if disable {
				if err := b.DisableKey(ctx, v.BackendRef); err != nil {
					return fmt.Errorf("disable %s: %w", v.KID, err)
				}
			}
			at, err := b.ScheduleKeyDeletion(ctx, v.BackendRef, days)
			if err != nil {
				return fmt.Errorf("schedule deletion of %s: %w", v.KID, err)
			}
			if err := c.audit(ctx, st, v, "awskms.schedule_deletion", map[string]any{
				"backend_ref": v.BackendRef, "pending_days": days, "deletion_date": store.FormatTime(at), "disabled_first": disable,
			}); err != nil {
				return fmt.Errorf("KMS deletion of %s IS scheduled for %s, but the audit trail could not record it: %w", v.KID, store.FormatTime(at), err)
			}
			ref, _ := awskms.ParseRef(v.BackendRef)
			fmt.Fprintf(cmd.OutOrStdout(), "scheduled deletion of %s: KMS key %s will be destroyed on %s\ncancel before then with: aws kms cancel-key-deletion --region %s --key-id %s\n",
				v.KID, ref.KeyID, store.FormatTime(at), b.Region(), ref.KeyID)
			return nil
		},
	}
	c.register(cmd)
	cmd.Flags().IntVar(&days, "pending-days", 30, "waiting period before KMS destroys the key material (7-30)")
	cmd.Flags().BoolVar(&disable, "disable", false, "also disable the KMS key now (keysvc no longer loads it; already implied by pending deletion)")
	return cmd
}

// refuseUnderTwoPersonRule refuses a direct KMS deletion of a version of a
// key whose policy has the two-person rule: the approval flow of
// `keysvc keys destroy` must not be bypassable by whoever can open key
// history and reach KMS.
func refuseUnderTwoPersonRule(k store.Key, v store.KeyVersion) error {
	var pol rotation.Policy
	if len(k.Policy) > 0 {
		if err := json.Unmarshal(k.Policy, &pol); err != nil {
			return fmt.Errorf("key %s: stored policy: %w", k.Name, err)
		}
	}
	if pol.TwoPersonRule {
		return fmt.Errorf("key %s has the two-person rule: destroying the key material of %s needs a second officer's approval, which this command would bypass; use `keysvc keys destroy %s --reason TEXT [--pending-days N]` (then `keysvc approvals approve ID` by a second officer)", k.Name, v.KID, v.KID)
	}
	return nil
}

func newAWSKMSDisableCmd() *cobra.Command {
	c := &awskmsVersionCmd{}
	cmd := &cobra.Command{
		Use:   "disable KID --reason TEXT",
		Short: "Disable a version's KMS key: KMS refuses to sign with it (reversible with aws kms enable-key)",
		Long: `Disable the KMS key of key version KID. Signing with it then fails with
key_disabled. Use it as a kill switch for a version that must stop signing
at once (revoke it in keysvc too), or to retire key material before
scheduling its deletion. Public keys stay published from key history.
Give --anchor-key-file and --tlog-url as serve runs with (the version is
checked against the transparency log first, ADR 0050), or --unanchored when
serve runs without key-history anchoring.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := context.WithTimeout(cmd.Context(), 60*time.Second)
			defer cancel()
			st, v, b, err := c.load(ctx, args[0])
			if err != nil {
				return err
			}
			defer st.Close()
			if v.State == store.StateActive || v.State == store.StatePending {
				fmt.Fprintf(cmd.ErrOrStderr(), "WARNING: %s is %s: signing with this key will fail with key_disabled until it is re-enabled or the key is rotated or revoked in keysvc.\n", v.KID, v.State)
			}
			if err := b.DisableKey(ctx, v.BackendRef); err != nil {
				return fmt.Errorf("disable %s: %w", v.KID, err)
			}
			if err := c.audit(ctx, st, v, "awskms.disable", map[string]any{"backend_ref": v.BackendRef}); err != nil {
				return fmt.Errorf("the KMS key of %s IS disabled, but the audit trail could not record it: %w", v.KID, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "disabled the KMS key of %s (%s)\n", v.KID, v.BackendRef)
			return nil
		},
	}
	c.register(cmd)
	return cmd
}
