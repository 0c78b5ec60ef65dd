package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/store"
)

func init() {
	extraCommands = append(extraCommands, newKeysCmd, newTokensCmd, newMigrateCmd)
}

func newKeysCmd() *cobra.Command {
	cf := &clientFlags{}
	var asJSON bool
	cmd := &cobra.Command{Use: "keys", Short: "Manage keys through the admin API (create, list, versions, rotate)"}
	cf.register(cmd)
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	newClient := func() (*client.Client, error) {
		tok, err := cf.token()
		if err != nil {
			return nil, err
		}
		return client.New(cf.server, tok), nil
	}
	ctxT := func(cmd *cobra.Command) (context.Context, context.CancelFunc) {
		return context.WithTimeout(cmd.Context(), 30*time.Second)
	}

	var create client.CreateKeyRequest
	createCmd := &cobra.Command{
		Use: "create NAME --issuer DOMAIN", Short: "Create a key with its first active version", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx, cancel := ctxT(cmd)
			defer cancel()
			create.Name = args[0]
			k, v, err := c.CreateKey(ctx, create)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": k, "version": v})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created key %s (issuer %s, %s, backend %s)\nactive kid: %s\n", k.Name, k.Issuer, k.Algorithm, k.Backend, v.KID)
			return nil
		},
	}
	createCmd.Flags().StringVar(&create.Issuer, "issuer", "", "issuer domain used in kids, e.g. villaakerlyckan.se (required)")
	createCmd.Flags().StringVar(&create.Algorithm, "algorithm", "EdDSA", "JWS algorithm: EdDSA or ES256")
	createCmd.Flags().StringVar(&create.Backend, "backend", "software", "key backend")
	createCmd.Flags().StringVar(&create.JWKSURL, "jwks-url", "", "URL where verifiers fetch this key's JWKS; default https://<issuer>/.well-known/jwks.json")
	createCmd.Flags().StringVar(&create.Reason, "reason", "", "why (recorded in the audit trail)")
	_ = createCmd.MarkFlagRequired("issuer")

	listCmd := &cobra.Command{
		Use: "list", Short: "List keys", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx, cancel := ctxT(cmd)
			defer cancel()
			keys, err := c.ListKeys(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), keys)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tISSUER\tALG\tBACKEND\tACTIVE KID\tVERSIONS\tDEFAULT")
			for _, k := range keys {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%v\n", k.Name, k.Issuer, k.Algorithm, k.Backend, k.ActiveKID, k.Versions, k.Default)
			}
			return tw.Flush()
		},
	}

	versionsCmd := &cobra.Command{
		Use: "versions NAME", Short: "List a key's versions with their lifecycle windows", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx, cancel := ctxT(cmd)
			defer cancel()
			vs, err := c.Versions(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), vs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KID\tSTATUS\tNOT BEFORE\tNOT AFTER\tBACKEND REF")
			for _, v := range vs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", v.KID, v.Status, dash(v.NotBefore), dash(v.NotAfter), v.BackendRef)
			}
			return tw.Flush()
		},
	}

	var reason string
	rotateCmd := &cobra.Command{
		Use: "rotate NAME", Short: "Retire the active version and activate a new one now", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, err := newClient()
			if err != nil {
				return err
			}
			ctx, cancel := ctxT(cmd)
			defer cancel()
			active, retired, err := c.Rotate(ctx, args[0], reason)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"active": active, "retired": retired})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated %s\nactive:  %s (since %s)\nretired: %s (signed %s .. %s)\n", args[0], active.KID, active.NotBefore, retired.KID, retired.NotBefore, retired.NotAfter)
			return nil
		},
	}
	rotateCmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit trail)")

	cmd.AddCommand(createCmd, listCmd, versionsCmd, rotateCmd)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newTokensCmd() *cobra.Command {
	sf := &storeFlags{}
	cmd := &cobra.Command{Use: "tokens", Short: "Manage API tokens in key history directly (create, list, revoke)"}
	var name string
	var scopes []string
	var ttl time.Duration
	createCmd := &cobra.Command{
		Use: "create --name NAME --scope SCOPE...", Short: "Create an API token; the secret is printed once", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range scopes {
				if !validScope(s) {
					return fmt.Errorf("unknown scope %q (sign:*, sign:<key>, admin:keys, admin:revoke, audit:read)", s)
				}
			}
			if name == "" || len(scopes) == 0 {
				return fmt.Errorf("--name and at least one --scope are required")
			}
			st, err := sf.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer st.Close()
			secret, rec, err := api.NewToken(name, scopes, ttl)
			if err != nil {
				return err
			}
			if err := st.InTx(cmd.Context(), func(tx store.Tx) error { return tx.InsertToken(cmd.Context(), rec) }); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s) created with scopes %s; it is shown once:\n", rec.ID, name, strings.Join(scopes, " "))
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			return nil
		},
	}
	createCmd.Flags().StringVar(&name, "name", "", "label, e.g. the node that will use it")
	createCmd.Flags().StringArrayVar(&scopes, "scope", nil, "scope to grant (repeatable)")
	createCmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime, e.g. 720h; 0: no expiry")
	sf.register(createCmd)

	listFlags := &storeFlags{}
	listCmd := &cobra.Command{
		Use: "list", Short: "List API tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			st, err := listFlags.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer st.Close()
			list, err := st.ListTokens(cmd.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tNAME\tSCOPES\tCREATED\tEXPIRES\tLAST USED\tREVOKED")
			for _, t := range list {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Name, strings.Join(t.Scopes, " "), store.FormatTime(t.CreatedAt), fmtTime(t.ExpiresAt), fmtTime(t.LastUsedAt), fmtTime(t.RevokedAt))
			}
			return tw.Flush()
		},
	}
	revokeFlags := &storeFlags{}
	revokeCmd := &cobra.Command{
		Use: "revoke ID", Short: "Revoke an API token", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			st, err := revokeFlags.open(cmd.Context(), false)
			if err != nil {
				return err
			}
			defer st.Close()
			return st.InTx(cmd.Context(), func(tx store.Tx) error { return tx.RevokeToken(cmd.Context(), args[0], store.Now()) })
		},
	}
	listFlags.register(listCmd)
	revokeFlags.register(revokeCmd)
	cmd.AddCommand(createCmd, listCmd, revokeCmd)
	return cmd
}

func validScope(s string) bool {
	switch s {
	case api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead:
		return true
	}
	return strings.HasPrefix(s, "sign:") && len(s) > len("sign:")
}

func fmtTime(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return store.FormatTime(*t)
}

func newMigrateCmd() *cobra.Command {
	sf := &storeFlags{}
	cmd := &cobra.Command{
		Use: "migrate", Short: "Apply key-history database migrations (idempotent)", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := sf.config()
			if cfg.PostgresURL == "" {
				if err := ensureDir(sf.dataDir); err != nil {
					return err
				}
			}
			applied, err := store.Migrate(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: applied %d migration(s) %v\n", sf.describe(), len(applied), applied)
			return nil
		},
	}
	sf.register(cmd)
	return cmd
}
