package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/api"
	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/store"
)

func init() {
	extraCommands = append(extraCommands, newKeysCmd, newTokensCmd, newMigrateCmd, newAuditCmd, newApprovalsCmd)
}

func newKeysCmd() *cobra.Command {
	cf := &clientFlags{}
	var asJSON bool
	cmd := &cobra.Command{Use: "keys", Short: "Manage keys through the admin API (create, list, versions, rotate)"}
	cf.register(cmd)
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print JSON")
	withClient := cf.withClient

	var create client.CreateKeyRequest
	var createPolicy client.Policy
	createCmd := &cobra.Command{
		Use: "create NAME --issuer DOMAIN", Short: "Create a key with its first active version", Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			create.Name = args[0]
			if createPolicy != (client.Policy{}) {
				create.Policy = &createPolicy
			}
			k, v, err := c.CreateKey(ctx, create)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"key": k, "version": v})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "created key %s (issuer %s, %s, backend %s)\nactive kid: %s\n", k.Name, k.Issuer, k.Algorithm, k.Backend, v.KID)
			return nil
		}),
	}
	createCmd.Flags().StringVar(&create.Issuer, "issuer", "", "issuer domain used in kids, e.g. villaakerlyckan.se (required)")
	createCmd.Flags().StringVar(&create.Algorithm, "algorithm", "EdDSA", "JWS algorithm: EdDSA or ES256")
	createCmd.Flags().StringVar(&create.Backend, "backend", "software", "key backend")
	createCmd.Flags().StringVar(&create.JWKSURL, "jwks-url", "", "URL where verifiers fetch this key's JWKS; default https://<issuer>/.well-known/jwks.json")
	createCmd.Flags().StringVar(&create.Reason, "reason", "", "why (recorded in the audit trail)")
	createCmd.Flags().BoolVar(&create.ShareIssuer, "share-issuer", false, "let the key take an issuer another key already has (a key per layer, VRP K5): their versions are published together in the issuer's did:web document")
	policyFlags(createCmd, &createPolicy)
	_ = createCmd.MarkFlagRequired("issuer")

	listCmd := &cobra.Command{
		Use: "list", Short: "List keys", Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			keys, err := c.ListKeys(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), keys)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tISSUER\tALG\tBACKEND\tACTIVE KID\tNEXT KID (AT)\tVERSIONS\tPOLICY\tDEFAULT")
			for _, k := range keys {
				next := "-"
				if k.NextKID != "" {
					next = k.NextKID + " (" + k.NextAt + ")"
				}
				pol := fmt.Sprintf("period=%s prepublish=%s retention=%s", dash(k.Policy.RotationPeriod), dash(k.Policy.Prepublish), dash(k.Policy.Retention))
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%v\n", k.Name, k.Issuer, k.Algorithm, k.Backend, k.ActiveKID, next, k.Versions, pol, k.Default)
			}
			return tw.Flush()
		}),
	}

	versionsCmd := &cobra.Command{
		Use: "versions NAME", Short: "List a key's versions with their lifecycle windows", Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			vs, err := c.Versions(ctx, args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), vs)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "KID\tSTATUS\tNOT BEFORE\tNOT AFTER\tCOMPROMISED AT\tMATERIAL DESTROYED\tTHUMBPRINT (RFC 7638)\tBACKEND REF")
			for _, v := range vs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", v.KID, v.Status, dash(v.NotBefore), dash(v.NotAfter), dash(v.CompromisedAt), dash(v.MaterialDestroyedAt), dash(v.Thumbprint), v.BackendRef)
			}
			return tw.Flush()
		}),
	}

	var reason string
	var rotateYes bool
	var scheduled, now bool
	rotateCmd := &cobra.Command{
		Use:   "rotate NAME (--scheduled | --now)",
		Short: "Publish a pending version that signs after prepublish (--scheduled), or rotate at once (--now, emergency)",
		Long: `Rotate a key. Say which:

--scheduled publishes a new pending version; it signs after the key's
prepublish period, once every verifier's cached JWKS holds it (VRP K3).

--now is the emergency form: the pending version, or a new one, signs at
once, and verifiers holding a cached JWKS reject its first signatures.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if scheduled == now {
				return usage(cmd, "give exactly one of --scheduled (routine: publish, then sign after prepublish) and --now (emergency: sign at once)")
			}
			if now {
				cf := confirmFlags{reason: reason, yes: rotateYes}
				return cf.confirm(cmd, fmt.Sprintf("emergency rotation of %s (the new version signs at once; verifiers with a cached JWKS reject its first signatures)", args[0]))
			}
			return nil
		},
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if scheduled {
				p, err := c.ScheduleRotation(ctx, args[0], reason)
				if err != nil {
					return err
				}
				if asJSON {
					return printJSON(cmd.OutOrStdout(), map[string]any{"pending": p})
				}
				fmt.Fprintf(cmd.OutOrStdout(), "scheduled %s\npending: %s (published now, signs from %s)\n", args[0], p.KID, p.NotBefore)
				return nil
			}
			active, retired, err := c.Rotate(ctx, args[0], reason)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"active": active, "retired": retired})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated %s\nactive:  %s (since %s)\nretired: %s (signed %s .. %s)\n", args[0], active.KID, active.NotBefore, retired.KID, retired.NotBefore, retired.NotAfter)
			return nil
		}),
	}
	rotateCmd.Flags().StringVar(&reason, "reason", "", "why (recorded in the audit trail; required with --now)")
	rotateCmd.Flags().BoolVarP(&rotateYes, "yes", "y", false, "with --now: do not ask for confirmation; for scripts")
	rotateCmd.Flags().BoolVar(&scheduled, "scheduled", false, "publish the next version as pending; it activates after the key's prepublish period")
	rotateCmd.Flags().BoolVar(&now, "now", false, "emergency: make the pending version, or a new one, sign at once")

	var activateReason string
	var emergency bool
	activateCmd := &cobra.Command{
		Use: "activate KID [--emergency --reason TEXT]", Short: "Promote a pending version now, ahead of its schedule (once published longer than the JWKS max-age)", Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if emergency && strings.TrimSpace(activateReason) == "" {
				return usage(cmd, "--emergency needs --reason TEXT (recorded in the audit trail)")
			}
			return nil
		},
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			activate := c.Activate
			if emergency {
				activate = c.ActivateEmergency
			}
			v, err := activate(ctx, args[0], activateReason)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), v)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "active: %s (since %s)\n", v.KID, v.NotBefore)
			return nil
		}),
	}
	activateCmd.Flags().StringVar(&activateReason, "reason", "", "why (recorded in the audit trail; required with --emergency)")
	activateCmd.Flags().BoolVar(&emergency, "emergency", false, "activate before the version has been published longer than the JWKS max-age (verifiers with a cached JWKS reject its first signatures); audited as an emergency")

	var compromisedAt string
	var revokeConfirm confirmFlags
	revokeCmd := &cobra.Command{
		Use:   "revoke KID --compromised-at RFC3339 --reason TEXT",
		Short: "Revoke a compromised version (VRP K4); revoking the active version rotates immediately",
		Args:  cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if _, err := time.Parse(time.RFC3339, compromisedAt); err != nil {
				return usage(cmd, "--compromised-at %q is not RFC 3339: give e.g. %s", compromisedAt, time.Now().UTC().Truncate(time.Second).Format(time.RFC3339))
			}
			return revokeConfirm.confirm(cmd, fmt.Sprintf("revoking key version %s (compromised at %s)", args[0], compromisedAt))
		},
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			revoked, active, err := c.Revoke(ctx, args[0], compromisedAt, revokeConfirm.reason)
			if filed, err := printPendingApproval(cmd, asJSON, err); filed || err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), map[string]any{"revoked": revoked, "active": active})
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked: %s (compromised at %s)\n", revoked.KID, revoked.CompromisedAt)
			if active != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "active:  %s (since %s)\n", active.KID, active.NotBefore)
			}
			return nil
		}),
	}
	revokeCmd.Flags().StringVar(&compromisedAt, "compromised-at", "", "when the key was (or may have been) compromised, RFC 3339 (required)")
	revokeConfirm.register(revokeCmd, "revocation is permanent")
	_ = revokeCmd.MarkFlagRequired("compromised-at")

	var destroyConfirm confirmFlags
	var pendingDays int
	destroyCmd := &cobra.Command{
		Use:   "destroy KID --reason TEXT [--pending-days N]",
		Short: "Destroy a retired or revoked version's private key material for good (its public key stays published)",
		Long: `Destroy the private key material of key version KID in its backend, for
good: software - the KEK-sealed key is removed from key history (database
backups taken before still hold it); pkcs11 - the token's key objects are
destroyed at once; awskms - the KMS key is scheduled for deletion after
--pending-days (7 to 30, default 30; cancellable in AWS until then).

Only retired and revoked versions qualify: an active or pending version
still signs (rotate, or revoke, first). The version keeps its state, window
and public key in the key history, so receipts it signed stay verifiable;
it can never sign again. Needs scope admin:revoke. Under the key's
two-person rule this files an approval request that a second officer grants
with 'keysvc approvals approve ID' within the hour.`,
		Args: cobra.ExactArgs(1),
		PreRunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("pending-days") && (pendingDays < 7 || pendingDays > 30) {
				return usage(cmd, "--pending-days must be 7 to 30, got %d", pendingDays)
			}
			return destroyConfirm.confirm(cmd, fmt.Sprintf("destroying the private key material of %s", args[0]))
		},
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			d, err := c.DestroyVersion(ctx, args[0], destroyConfirm.reason, pendingDays)
			if filed, err := printPendingApproval(cmd, asJSON, err); filed || err != nil {
				return err
			}
			if asJSON {
				return printJSON(cmd.OutOrStdout(), d)
			}
			printDestroyed(cmd.OutOrStdout(), d)
			return nil
		}),
	}
	destroyConfirm.register(destroyCmd, "destruction is permanent")
	destroyCmd.Flags().IntVar(&pendingDays, "pending-days", 0, "awskms only: days before KMS deletes the key, 7 to 30 (default 30); other backends destroy at once")

	var pol client.Policy
	var policyReason string
	policyCmd := &cobra.Command{
		Use:   "policy NAME [--rotation-period D] [--prepublish D] [--retention D] [--two-person-rule[=false]]",
		Short: "Change a key's rotation policy: only the flags given change",
		Long: `Change a key's policy. Only the flags given change; the rest is kept as it
is in force (the API replaces the whole policy; this command reads it
first). --rotation-period 0 turns scheduled rotation off.
--two-person-rule=false switches the two-person rule off: while it is on,
that is filed for a second officer's approval (keysvc approvals approve ID).`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			keys, err := c.ListKeys(ctx)
			if err != nil {
				return err
			}
			i := slices.IndexFunc(keys, func(k client.Key) bool { return k.Name == args[0] })
			if i < 0 {
				return fmt.Errorf("no key %q", args[0])
			}
			next := keys[i].Policy
			f := cmd.Flags()
			if f.Changed("rotation-period") {
				next.RotationPeriod = pol.RotationPeriod
			}
			if f.Changed("prepublish") {
				next.Prepublish = pol.Prepublish
			}
			if f.Changed("retention") {
				next.Retention = pol.Retention
			}
			if f.Changed("two-person-rule") {
				next.TwoPersonRule = pol.TwoPersonRule
			}
			err = c.SetPolicy(ctx, args[0], next, policyReason)
			if filed, err := printPendingApproval(cmd, asJSON, err); filed || err != nil {
				return err
			}
			printPolicy(cmd.OutOrStdout(), args[0], next)
			return nil
		}),
	}
	policyFlags(policyCmd, &pol)
	policyCmd.Flags().StringVar(&policyReason, "reason", "", "why (recorded in the audit trail)")

	var backendTo, backendReason string
	backendCmd := &cobra.Command{
		Use:   "backend NAME --to KIND",
		Short: "Move a key to another backend (software, pkcs11, awskms): the next rotation creates its version there",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if err := c.SetBackend(ctx, args[0], backendTo, backendReason); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "key %s now creates new versions in backend %s; rotate (keysvc keys rotate %s --scheduled) to move signing there\n", args[0], backendTo, args[0])
			return nil
		}),
	}
	backendCmd.Flags().StringVar(&backendTo, "to", "", "backend kind for new versions (required)")
	backendCmd.Flags().StringVar(&backendReason, "reason", "", "why (recorded in the audit trail)")
	_ = backendCmd.MarkFlagRequired("to")

	cmd.AddCommand(createCmd, listCmd, versionsCmd, rotateCmd, activateCmd, revokeCmd, destroyCmd, policyCmd, backendCmd)
	return cmd
}

func newApprovalsCmd() *cobra.Command {
	cf := &clientFlags{}
	cmd := &cobra.Command{Use: "approvals", Short: "Two-person rule: list and grant pending approval requests"}
	cf.register(cmd)
	var status string
	var asJSON bool
	listCmd := &cobra.Command{
		Use: "list [--status pending] [--json]", Short: "List approval requests: what each would change, on which key and version, who asked and why", Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			switch status {
			case "", "pending", "approved", "expired":
				return nil
			}
			return usage(cmd, "--status %q: give pending, approved, expired, or \"\" for all", status)
		},
		RunE: cf.withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			list, err := c.Approvals(ctx, status)
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []client.Approval{}
				}
				return printJSON(cmd.OutOrStdout(), list)
			}
			if len(list) == 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "no %s approval requests\n", cmp.Or(status, "(any status)"))
				return nil
			}
			var policies map[string]client.Policy
			for _, a := range list {
				if a.Action == "policy" && policies == nil {
					keys, err := c.ListKeys(ctx)
					if err != nil {
						return err
					}
					policies = map[string]client.Policy{}
					for _, k := range keys {
						policies[k.Name] = k.Policy
					}
				}
			}
			for i, a := range list {
				if i > 0 {
					fmt.Fprintln(cmd.OutOrStdout())
				}
				printApproval(cmd.OutOrStdout(), a, policies[a.Key])
			}
			return nil
		}),
	}
	listCmd.Flags().StringVar(&status, "status", "pending", "pending, approved, expired, or empty for all")
	listCmd.Flags().BoolVar(&asJSON, "json", false, "print JSON: the API's approval objects, params included")
	approveCmd := &cobra.Command{
		Use: "approve ID", Short: "Grant an approval as the second officer; the change (revocation, key-material destruction, or switching the two-person rule off) happens now", Args: cobra.ExactArgs(1),
		RunE: cf.withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			res, err := c.ApproveAction(ctx, args[0])
			if err != nil {
				return err
			}
			if res.Destroyed != nil {
				printDestroyed(cmd.OutOrStdout(), *res.Destroyed)
				return nil
			}
			if res.Policy != nil {
				printPolicy(cmd.OutOrStdout(), res.Key, *res.Policy)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revoked: %s (compromised at %s)\n", res.Revoked.KID, res.Revoked.CompromisedAt)
			if res.Active != nil {
				fmt.Fprintf(cmd.OutOrStdout(), "active:  %s (since %s)\n", res.Active.KID, res.Active.NotBefore)
			}
			return nil
		}),
	}
	cmd.AddCommand(listCmd, approveCmd)
	return cmd
}

// printApproval writes one approval request for the officer deciding it:
// the action, key, version, requester, reason and the exact change (for
// a policy, each field that differs from the policy in force, old -> new).
func printApproval(w io.Writer, a client.Approval, current client.Policy) {
	var p struct {
		Reason        string        `json:"reason"`
		CompromisedAt string        `json:"compromised_at"`
		PendingDays   int           `json:"pending_days"`
		Policy        client.Policy `json:"policy"`
	}
	_ = json.Unmarshal(a.Params, &p) // unknown shapes print without a change line
	fmt.Fprintf(w, "approval %s (%s, expires %s)\n", a.ID, a.Status, a.ExpiresAt)
	fmt.Fprintf(w, "  action:       %s\n", approvalAction(a.Action))
	fmt.Fprintf(w, "  key:          %s\n", a.Key)
	fmt.Fprintf(w, "  version:      %s\n", dash(a.KID))
	fmt.Fprintf(w, "  requested by: %s at %s\n", cmp.Or(a.RequestedByName, a.RequestedBy), a.RequestedAt)
	fmt.Fprintf(w, "  reason:       %q\n", p.Reason)
	switch a.Action {
	case "revoke":
		fmt.Fprintf(w, "  change:       status -> revoked, compromised_at %s (signatures after it stop verifying)\n", p.CompromisedAt)
	case "destroy":
		days := ""
		if p.PendingDays > 0 {
			days = fmt.Sprintf("; --pending-days %d (the AWS KMS deletion window)", p.PendingDays)
		}
		fmt.Fprintf(w, "  change:       private key material destroyed%s\n", days)
	case "policy":
		diff := policyDiff(current, p.Policy)
		if len(diff) == 0 {
			diff = []string{"none (the policy in force already equals the requested one)"}
		}
		for i, d := range diff {
			label := "  change:       "
			if i > 0 {
				label = "                "
			}
			fmt.Fprintf(w, "%s%s\n", label, d)
		}
	}
	if a.DecidedBy != "" {
		fmt.Fprintf(w, "  decided by:   %s at %s\n", cmp.Or(a.DecidedByName, a.DecidedBy), a.DecidedAt)
	}
}

func approvalAction(a string) string {
	switch a {
	case "revoke":
		return "revoke (keysvc keys revoke)"
	case "destroy":
		return "destroy key material (keysvc keys destroy)"
	case "policy":
		return "change the rotation policy (keysvc keys policy)"
	}
	return a
}

// policyDiff lists the fields of next that differ from cur, "name: old -> new".
func policyDiff(cur, next client.Policy) []string {
	var out []string
	add := func(name, old, new string) {
		if old != new {
			out = append(out, fmt.Sprintf("%s: %s -> %s", name, dash(old), dash(new)))
		}
	}
	add("rotation_period", cur.RotationPeriod, next.RotationPeriod)
	add("prepublish", cur.Prepublish, next.Prepublish)
	add("retention", cur.Retention, next.Retention)
	add("two_person_rule", fmt.Sprint(cur.TwoPersonRule), fmt.Sprint(next.TwoPersonRule))
	return out
}

func policyFlags(cmd *cobra.Command, p *client.Policy) {
	cmd.Flags().StringVar(&p.RotationPeriod, "rotation-period", "", "rotate on this schedule, e.g. 2160h (0 or empty: by hand only)")
	cmd.Flags().StringVar(&p.Prepublish, "prepublish", "", "publish the next version this long before it signs; must exceed the JWKS max-age (default twice the max-age)")
	cmd.Flags().StringVar(&p.Retention, "retention", "", "keep retired versions in the JWKS this long after they stop signing (empty: forever)")
	cmd.Flags().BoolVar(&p.TwoPersonRule, "two-person-rule", false, "revocation and key-material destruction need a second officer's approval (keysvc approvals approve ID)")
}

// printDestroyed prints the outcome of a key-material destruction.
func printDestroyed(w io.Writer, d client.Destroyed) {
	fmt.Fprintf(w, "destroyed: key material of %s (%s, backend %s) at %s\n", d.Version.KID, d.Version.Status, d.Backend, d.Version.MaterialDestroyedAt)
	if d.DeletionDate != "" {
		fmt.Fprintf(w, "KMS deletes the key on %s (cancellable in AWS until then)\n", d.DeletionDate)
	}
	if d.Note != "" {
		fmt.Fprintf(w, "note: %s\n", d.Note)
	}
	fmt.Fprintf(w, "its public key stays in the key history: receipts it signed remain verifiable\n")
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
	var name, tokenReason string
	var scopes []string
	createAnchor, revokeAnchor := &cliAnchorFlags{}, &cliAnchorFlags{}
	var ttl time.Duration
	createCmd := &cobra.Command{
		Use: "create --name NAME --scope SCOPE...", Short: "Create an API token; the secret is printed once", Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			for _, s := range scopes {
				if !validScope(s) {
					return usage(cmd, "unknown scope %q: give sign:*, sign:<key>, sign:<key>:jws, sign:<key>:transport, sign:<key>:detached, admin:keys, admin:revoke or audit:read", s)
				}
			}
			if name == "" || len(scopes) == 0 {
				return usage(cmd, "%q needs --name NAME and at least one --scope SCOPE, e.g. keysvc tokens create --name alice --scope admin:keys", cmd.CommandPath())
			}
			if !api.ValidPrincipalName(name) {
				return usage(cmd, "--name %q: the token name must be lower-case letters, digits and . _ @ - (at most 64), e.g. alice or node-1", name)
			}
			return nil
		},
		RunE: sf.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
			st, err := createAnchor.wrap(cmd.Context(), st, true, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			secret, rec, err := api.CreateToken(cmd.Context(), st, name, scopes, ttl, api.TokenAudit{Actor: localActor(), Reason: tokenReason})
			if err != nil {
				return err
			}
			createAnchor.warnUnrecorded(cmd.ErrOrStderr())
			fmt.Fprintf(cmd.ErrOrStderr(), "token %s (%s) created with scopes %s; it is shown once:\n", rec.ID, name, strings.Join(scopes, " "))
			fmt.Fprintln(cmd.OutOrStdout(), secret)
			return nil
		}),
	}
	createCmd.Flags().StringVar(&name, "name", "", "the principal the token belongs to: the officer (person) or node, e.g. alice or node-1; lower-case letters, digits and . _ @ -. Every token of one name is one principal to the two-person rule")
	createCmd.Flags().StringVar(&tokenReason, "reason", "", "why (recorded in the audit trail)")
	createCmd.Flags().StringArrayVar(&scopes, "scope", nil, "scope to grant (repeatable)")
	createCmd.Flags().DurationVar(&ttl, "ttl", 0, "lifetime, e.g. 720h; 0: no expiry")
	sf.register(createCmd)
	createAnchor.register(createCmd, true)

	listFlags := &storeFlags{}
	listCmd := &cobra.Command{
		Use: "list", Short: "List API tokens (never their secrets)", Args: cobra.NoArgs,
		RunE: listFlags.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
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
		}),
	}
	revokeFlags := &storeFlags{}
	var revokeReason string
	revokeCmd := &cobra.Command{
		Use: "revoke ID", Short: "Revoke an API token (audited)", Args: cobra.ExactArgs(1),
		RunE: revokeFlags.withStore(func(cmd *cobra.Command, args []string, st store.Store) error {
			st, err := revokeAnchor.wrap(cmd.Context(), st, false, cmd.ErrOrStderr())
			if err != nil {
				return err
			}
			rec, err := api.RevokeToken(cmd.Context(), st, args[0], api.TokenAudit{Actor: localActor(), Reason: revokeReason})
			if errors.Is(err, api.ErrTokenNotFound) {
				return fmt.Errorf("no token with id %q in %s: `keysvc tokens list` shows the ids (the ID column, not the name or the secret)", args[0], revokeFlags.describe())
			}
			if err != nil {
				return err
			}
			revokeAnchor.warnUnrecorded(cmd.ErrOrStderr())
			fmt.Fprintf(cmd.OutOrStdout(), "revoked token %s (%s, scopes %s) at %s; requests with it now get 401 (servers re-read tokens every --reload-interval)\n", rec.ID, rec.Name, strings.Join(rec.Scopes, " "), fmtTime(rec.RevokedAt))
			return nil
		}),
	}
	revokeCmd.Flags().StringVar(&revokeReason, "reason", "", "why (recorded in the audit trail)")
	listFlags.register(listCmd)
	revokeFlags.register(revokeCmd)
	revokeAnchor.register(revokeCmd, false)
	cmd.AddCommand(createCmd, listCmd, revokeCmd)
	return cmd
}

// localActor names who runs a CLI command that changes key history
// directly (tokens create/revoke): the operating-system user, the host and
// the uid, e.g. "cli:alice@officer-shell (uid 1000)". Those commands need
// database access, so the person is whoever holds it on that host.
func localActor() string {
	name := "unknown"
	if u, err := user.Current(); err == nil && u.Username != "" {
		name = u.Username
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "unknown-host"
	}
	return fmt.Sprintf("cli:%s@%s (uid %d)", name, host, os.Getuid())
}

func validScope(s string) bool {
	switch s {
	case api.ScopeSignAll, api.ScopeAdminKeys, api.ScopeAdminRevoke, api.ScopeAuditRead:
		return true
	}
	rest, ok := strings.CutPrefix(s, "sign:")
	if !ok || rest == "" {
		return false
	}
	key, layer, hasLayer := strings.Cut(rest, ":")
	return key != "" && key != "*" && (!hasLayer || layer == api.LayerJWS || layer == api.LayerTransport || layer == api.LayerDetached)
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

func newAuditCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "audit", Short: "Read and verify the hash-chained audit trail (reads key history directly)"}
	listFlags := &storeFlags{}
	var asJSON bool
	var key string
	listCmd := &cobra.Command{
		Use: "list [--key NAME] [--json]", Short: "List audit events, oldest first", Args: cobra.NoArgs,
		RunE: listFlags.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
			rows, err := st.ListAudit(cmd.Context(), 0, 0)
			if err != nil {
				return err
			}
			var out []api.AuditEvent
			for _, r := range rows {
				if key == "" || r.KeyName == key {
					out = append(out, api.AuditEventFrom(r))
				}
			}
			if asJSON {
				if out == nil {
					out = []api.AuditEvent{}
				}
				return printJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "SEQ\tAT\tACTOR\tACTION\tKEY\tKID\tREASON")
			for _, e := range out {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%q\n", e.Seq, e.At, e.Actor, e.Action, dash(e.Key), dash(e.KID), e.Reason)
			}
			return tw.Flush()
		}),
	}
	listFlags.register(listCmd)
	listCmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	listCmd.Flags().StringVar(&key, "key", "", "only events of this key")

	verifyFlags := &storeFlags{}
	anchored := &auditAnchorFlags{}
	verifyCmd := &cobra.Command{
		Use:   "verify",
		Short: "Check the audit hash chain (and, with --anchor-key-file and --tlog-url, against the heads anchored in the transparency log); exit 1 naming the first broken or divergent row",
		Args:  cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if anchored.keyFile == "" && (len(anchored.urls) > 0 || cmd.Flags().Changed("tlog-log-keys") || anchored.scan) {
				return usage(cmd, "--tlog-url, --tlog-log-keys and --scan check the chain against the transparency log only with --anchor-key-file (the node's event key)")
			}
			return anchored.checkScan(cmd)
		},
		RunE: verifyFlags.withStore(func(cmd *cobra.Command, _ []string, st store.Store) error {
			rows, err := st.ListAudit(cmd.Context(), 0, 0)
			if err != nil {
				return err
			}
			broken, err := store.VerifyAuditChain(rows)
			if err != nil {
				return err
			}
			if broken != 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "audit chain BROKEN at row %d (of %d): the row, or one before it, was altered or removed\n", broken, len(rows))
				return exitError{code: 1}
			}
			head := ""
			if len(rows) > 0 {
				head = rows[len(rows)-1].Hash
			}
			fmt.Fprintf(cmd.OutOrStdout(), "audit chain intact: %d rows, head %s\n", len(rows), head)
			return anchored.verifyAnchored(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), st, rows)
		}),
	}
	verifyFlags.register(verifyCmd)
	anchored.register(verifyCmd)
	cmd.AddCommand(listCmd, verifyCmd)
	return cmd
}

// printPendingApproval reports a change filed for a second principal's
// approval (two-person rule): filed is true when err was that; any other
// error is returned as it is.
func printPendingApproval(cmd *cobra.Command, asJSON bool, err error) (filed bool, _ error) {
	var pending *client.PendingApproval
	if !errors.As(err, &pending) {
		return false, err
	}
	if asJSON {
		return true, printJSON(cmd.OutOrStdout(), map[string]any{"approval": pending.Approval})
	}
	fmt.Fprintf(cmd.OutOrStdout(), "two-person rule: %s\n", pending.Error())
	return true, nil
}

// withClient wraps a subcommand body: it resolves the token, builds the
// API client and bounds the call to 30 s.
func (cf *clientFlags) withClient(run func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		tok, err := cf.token()
		if err != nil {
			return err
		}
		// 90 s: an immediate rotation waits for its activation instant,
		// and a lost answer is retried with the same Idempotency-Key.
		ctx, cancel := context.WithTimeout(cmd.Context(), 90*time.Second)
		defer cancel()
		c := client.New(cf.server, tok)
		c.Idempotent = true
		return cf.hint(run(ctx, c, cmd, args))
	}
}

// hint adds what to do to the errors an operator meets first: the server
// is not running (or --server is wrong), the token is refused, the token
// lacks a scope, the route is on another listener.
func (cf *clientFlags) hint(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.Error
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("cannot reach keysvc at %s (connection refused): start it with `keysvc serve --dev` (it keeps running; use a second terminal), or point --server / KEYSVC_SERVER at the admin listener", cf.server)
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return fmt.Errorf("%w\nthe server refused the token from %s: use a token it knows (KEYSVC_TOKEN or --token-file; `keysvc tokens list` on the server's data directory shows them)", err, cf.tokenSource())
	case errors.As(err, &ae) && ae.Status == http.StatusForbidden:
		return fmt.Errorf("%w\nthe token from %s lacks that scope: create one that has it (keysvc tokens create --name NAME --scope admin:keys ...)", err, cf.tokenSource())
	case errors.As(err, &ae) && ae.Code == "not_found" && strings.HasPrefix(ae.Message, "no route for"):
		return fmt.Errorf("%w\n--server %s does not serve this route", err, cf.server)
	}
	var ue *url.Error
	if errors.As(err, &ue) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w\ncheck --server / KEYSVC_SERVER (now %s): the admin listener's base URL, e.g. http://127.0.0.1:8080", err, cf.server)
	}
	return err
}

// tokenSource says where token() took the token from.
func (cf *clientFlags) tokenSource() string {
	switch {
	case os.Getenv("KEYSVC_TOKEN") != "":
		return "KEYSVC_TOKEN"
	case cf.tokenFile != "":
		return cf.tokenFile
	default:
		return filepath.Join(cf.dataDir, devTokenFile)
	}
}

// printPolicy prints a key's policy in force.
func printPolicy(w io.Writer, key string, p client.Policy) {
	fmt.Fprintf(w, "policy of %s: rotation_period=%s prepublish=%s retention=%s two_person_rule=%t\n",
		key, dash(p.RotationPeriod), dash(p.Prepublish), dash(p.Retention), p.TwoPersonRule)
}
