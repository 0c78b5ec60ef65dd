package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/verifier"
)

// fetchTimeout bounds fetching --jwks, --history or --log-keys from a URL.
const fetchTimeout = 10 * time.Second

// Exit codes of keysvc verify.
const (
	exitFullyVerified = 0 // every attestation verified
	exitInvalid       = 1 // receipt_valid false (also usage and I/O errors)
	exitPartial       = 2 // receipt valid, not every attestation verified
)

// newVerifyCmd is `keysvc verify RECEIPT.json (--jwks FILE|URL | --history
// FILE|URL [--log-keys FILE|URL]) [--at RFC3339] [--json]`.
func newVerifyCmd() *cobra.Command {
	var (
		jwksArg    string
		historyArg string
		logKeysArg string
		witnessArg string
		witnessK   int
		logURLs    []string
		nowArg     string
		atArg      string
		asJSON     bool
		checkTyp   bool
		layerTyps  []string
	)
	cmd := &cobra.Command{
		Use:   "verify RECEIPT.json (--jwks FILE|URL | --history FILE|URL [--log-keys FILE|URL])",
		Short: "Verify a VRP receipt v1 against a JWKS or a key-history document",
		Long: `Verify a VRP receipt envelope v1 (VRP receipt spec v1, D1–D5): each
attestation's validity window, its compact JWS signature (EdDSA or ES256)
over the bytes as received, and its freshness at --at.

RECEIPT.json may be "-" for standard input. Exactly one of --jwks and
--history gives the keys; it verifies every attestation, whatever its source
member names. Each of --jwks, --history and --log-keys is a file or an
http(s) URL (fetched once, 10 s timeout, 1 MiB limit).

--jwks is a plain JWK Set (such as /.well-known/jwks.json): the v1
verification, lifecycle-unaware.

--history is a key-history document (keysvc's {"issuer","key","keys"}): the
lifecycle-aware verification (VRP K2–K4, K6). A signature must come from a
version that could sign at the attestation's valid_from: an active version
after its vrp_not_before, a retired one inside its window, never a pending
one (else key_retired_out_of_window). A revoked version's signature needs a
transparency-log proof (tlog) whose Signed Tree Head, signed by a key in
--log-keys, predates vrp_compromised_at (else tlog_required or key_revoked).

--log-keys is a JWK Set of the transparency-log keys you trust (Ed25519),
never the node's own keys; it needs --history. Public keys only: a set
with a private member ("d") or with no usable key is refused (exit 1), as
serve's --tlog-log-keys is. In --jwks and --history, a key with "d" is
skipped with a warning and never verifies anything. When the proof carries the
log's C2SP checkpoint (keysvc receipt prove inserts it), the checkpoint must
be signed by the same key under the log_id and describe the STH's tree.

--witness-keys is a file (or URL) of witness verifier keys you trust, one
C2SP signed-note vkey per line (cosignature/v1; # comments). A revoked
version's signature then also needs --witnesses-required (default 1)
distinct trusted witnesses whose cosignatures on the proof's checkpoint
were made strictly before vrp_compromised_at (a cosignature's whole-second
timestamp T counts when T + 1 s is not after it).

--log-url (repeatable) is a log's base URL: each proof that would accept a
revoked version's signature must then be consistent with that log's newest
Signed Tree Head (verified with --log-keys; RFC 9162 consistency proof from
the log); a log that contradicts its own proof rejects it (key_revoked, and
a warning names both tree sizes).

--check-typ checks each layer's JWS typ (ADR 0013): a transport attestation
must carry typ vrp-mcp-transport+jws, the transport layer's, and no other
layer may carry it. --layer-typ LAYER=TYP (repeatable) sets a layer's typ
(and implies the check), e.g. --layer-typ offer=vrp-offer+jws. Off by
default: the VRP receipt v1 rules do not look at typ, and transport JWS
made before ADR 0013 (and the public VRP vectors) carry typ JWT.

--at is the instant freshness is judged at (default: now), so a receipt
can be checked as of when it was made; --now is the same flag under its
older name.

Exit status: 0 fully verified; 2 receipt valid but not every attestation
verified; 1 receipt invalid, or a usage or I/O error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			switch {
			case jwksArg == "" && historyArg == "":
				return errors.New("one of --jwks and --history is required")
			case jwksArg != "" && historyArg != "":
				return errors.New("--jwks and --history exclude each other: give one")
			case logKeysArg != "" && historyArg == "":
				return errors.New("--log-keys needs --history (a plain JWKS verification never uses a transparency log)")
			case (witnessArg != "" || len(logURLs) > 0) && logKeysArg == "":
				return errors.New("--witness-keys and --log-url need --log-keys")
			case cmd.Flags().Changed("witnesses-required") && witnessArg == "":
				return errors.New("--witnesses-required needs --witness-keys")
			case nowArg != "" && atArg != "":
				return errors.New("--at and --now are the same flag: give one")
			}
			atFlag, atValue := "--at", atArg
			if nowArg != "" {
				atFlag, atValue = "--now", nowArg
			}
			now := time.Now()
			if atValue != "" {
				t, err := verifier.ParseInstant(atValue)
				if err != nil {
					return fmt.Errorf("%s %q: want an RFC 3339 date-time such as 2026-06-24T12:00:00Z", atFlag, atValue)
				}
				now = t
			}
			receipt, err := readReceipt(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			opts := verifier.Options{Now: now}
			if checkTyp || len(layerTyps) > 0 {
				opts.LayerTyps = map[string]string{}
				if checkTyp {
					opts.LayerTyps = verifier.KeysvcLayerTyps()
				}
				for _, lt := range layerTyps {
					layer, typ, ok := strings.Cut(lt, "=")
					if !ok || layer == "" || typ == "" {
						return fmt.Errorf("--layer-typ %q: want LAYER=TYP, e.g. transport=%s", lt, verifier.TransportTyp)
					}
					opts.LayerTyps[layer] = typ
				}
			}
			warn := func(format string, a ...any) {
				fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: warning: "+format+"\n", a...)
			}
			if historyArg != "" {
				body, err := loadDocument(cmd.Context(), "--history", historyArg)
				if err != nil {
					return err
				}
				h, err := verifier.ParseKeyHistory(body)
				if err != nil {
					return fmt.Errorf("--history %s: %w", displayArg(historyArg), err)
				}
				for _, e := range h.Skipped {
					warn("--history %s: skipped %v", displayArg(historyArg), e)
				}
				opts.History = h
				if logKeysArg != "" {
					body, err := loadDocument(cmd.Context(), "--log-keys", logKeysArg)
					if err != nil {
						return err
					}
					// The same rules as serve's and anchor check's
					// --tlog-log-keys: no usable key, or one with "d", is
					// refused outright rather than failing every proof.
					if opts.LogKeys, err = parseLogKeys(body); err != nil {
						return fmt.Errorf("--log-keys %s: %w", displayArg(logKeysArg), err)
					}
					for _, e := range opts.LogKeys.Skipped {
						warn("--log-keys %s: skipped %v", displayArg(logKeysArg), e)
					}
				}
				if witnessArg != "" {
					body, err := loadDocument(cmd.Context(), "--witness-keys", witnessArg)
					if err != nil {
						return err
					}
					if opts.Witnesses, err = verifier.ParseWitnessKeys(body); err != nil {
						return fmt.Errorf("--witness-keys %s: %w", witnessArg, err)
					}
					if witnessK < 0 || witnessK > len(opts.Witnesses) {
						return fmt.Errorf("--witnesses-required %d: want 0..%d (the witnesses in --witness-keys)", witnessK, len(opts.Witnesses))
					}
					opts.WitnessesRequired = witnessK
				}
				if len(logURLs) > 0 {
					cc, err := newConsistencyChecker(logURLs, opts.LogKeys, warn)
					if err != nil {
						return err
					}
					opts.Consistency = cc.check
				}
			} else {
				body, err := loadDocument(cmd.Context(), "--jwks", jwksArg)
				if err != nil {
					return err
				}
				set, err := verifier.ParseJWKS(body)
				if err != nil {
					return fmt.Errorf("--jwks %s: %w", displayArg(jwksArg), err)
				}
				for _, e := range set.Skipped {
					warn("--jwks %s: skipped %v", displayArg(jwksArg), e)
				}
				for _, kid := range append(revokedKIDs(set), historyRevokedKIDs(body)...) {
					warn("--jwks %s lists key %s as revoked, and a plain JWKS verification ignores that; use --history for lifecycle-aware verification", displayArg(jwksArg), printable(kid))
				}
				opts.Resolve = verifier.StaticJWKS(set)
			}

			res := verifier.VerifyReceipt(cmd.Context(), receipt, opts)

			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else if err := printResult(out, res); err != nil {
				return err
			}
			switch {
			case !res.ReceiptValid:
				return exitError{exitInvalid}
			case !res.FullyVerified:
				return exitError{exitPartial}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&jwksArg, "jwks", "", "JWK Set: a file path or an http(s) URL (this or --history is required)")
	cmd.Flags().StringVar(&historyArg, "history", "", "key-history document: a file path or an http(s) URL; lifecycle-aware verification")
	cmd.Flags().StringVar(&logKeysArg, "log-keys", "", "JWK Set of trusted transparency-log keys: a file path or an http(s) URL (with --history)")
	cmd.Flags().StringVar(&witnessArg, "witness-keys", "", "trusted witness verifier keys (C2SP vkeys, one per line): a file path or an http(s) URL (with --log-keys)")
	cmd.Flags().IntVar(&witnessK, "witnesses-required", 1, "distinct trusted witnesses that must have cosigned a revoked version's proof before its compromise (with --witness-keys)")
	cmd.Flags().StringArrayVar(&logURLs, "log-url", nil, "transparency log base URL: check each accepted proof against the log's newest tree head (consistency; repeatable; with --log-keys)")
	cmd.Flags().StringVar(&atArg, "at", "", "judge freshness at this RFC 3339 instant (default: the current time)")
	cmd.Flags().StringVar(&nowArg, "now", "", "the same as --at")
	cmd.Flags().BoolVar(&checkTyp, "check-typ", false, "check each layer's JWS typ (ADR 0013): transport attestations need typ "+verifier.TransportTyp+", and no other layer may carry it")
	cmd.Flags().StringArrayVar(&layerTyps, "layer-typ", nil, "LAYER=TYP: the JWS typ a layer's signatures must carry (repeatable; implies the typ check)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON (the VRP reference verifier's shape)")
	return cmd
}

// revokedKIDs returns the kids of set's keys whose vrp_key_status is
// "revoked" (a key-history document given as --jwks).
func revokedKIDs(set *verifier.JWKS) []string {
	var kids []string
	for _, k := range set.Keys {
		var m struct {
			Status any `json:"vrp_key_status"`
		}
		if json.Unmarshal(k.Raw, &m) == nil && m.Status == "revoked" {
			kids = append(kids, k.KeyID)
		}
	}
	return kids
}

// historyRevokedKIDs returns the kids listed under vrp_revoked_keys (a
// key-history document given as --jwks, ADR 0027: a plain JWKS reading
// never sees them, so their signatures fail as sig_invalid rather than
// key_revoked).
func historyRevokedKIDs(doc []byte) []string {
	var h struct {
		Revoked []struct {
			KID string `json:"kid"`
		} `json:"vrp_revoked_keys"`
	}
	if json.Unmarshal(doc, &h) != nil {
		return nil
	}
	var kids []string
	for _, k := range h.Revoked {
		kids = append(kids, k.KID)
	}
	return kids
}

// readReceipt reads the receipt file, or stdin for "-". It reads at most one
// byte past verifier.MaxReceiptBytes: a longer receipt is then reported as
// malformed_receipt by the verifier rather than read whole.
func readReceipt(name string, stdin io.Reader) ([]byte, error) {
	r := stdin
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, verifier.MaxReceiptBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read receipt %s: %w", name, err)
	}
	return b, nil
}

// displayArg is a --jwks/--history/--log-keys value for messages: a URL
// without its credentials (displayURL), a file path as it is.
func displayArg(arg string) string {
	if u, err := url.Parse(arg); err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) {
		return displayURL(arg)
	}
	return arg
}

// loadDocument reads the document a flag names: an http(s) URL (GET, 200
// only) or a file, at most verifier.MaxJWKSBytes either way.
func loadDocument(ctx context.Context, flag, arg string) ([]byte, error) {
	if u, err := url.Parse(arg); err == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) {
		return fetchDocument(ctx, flag, u.String())
	}
	f, err := os.Open(arg)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	defer f.Close()
	return readCapped(f, flag, arg)
}

// readCapped reads r whole, refusing more than verifier.MaxJWKSBytes.
func readCapped(r io.Reader, flag, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, verifier.MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: read %s: %w", flag, name, err)
	}
	if len(b) > verifier.MaxJWKSBytes {
		return nil, fmt.Errorf("%s: %s is larger than %d bytes", flag, name, verifier.MaxJWKSBytes)
	}
	return b, nil
}

// fetchDocument GETs a key document with a 10 s timeout. It follows at
// most sameorigin.MaxRedirects redirects, and only within the URL's origin
// (scheme, host and port, RFC 6454): a redirect to another host or port, or
// from https to http, could hand the verifier keys from somewhere the user
// did not name, so it is refused. Errors name the URL without its
// credentials (displayURL).
func fetchDocument(ctx context.Context, flag, rawURL string) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	shown := displayURL(rawURL)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, fmt.Errorf("%s %s: not a URL", flag, shown)
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	client := sameorigin.Client(fetchTimeout)
	resp, err := client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // its message repeats the URL, credentials and all
		}
		return nil, fmt.Errorf("%s: fetch %s: %v", flag, shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: fetch %s: HTTP %s", flag, shown, resp.Status)
	}
	return readCapped(resp.Body, flag, shown)
}

// displayURL is rawURL for messages: userinfo replaced by REDACTED and every
// query value by REDACTED (a URL may carry a password or an access token
// in either). A string that does not parse is not shown.
func displayURL(rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "(a URL that does not parse)"
	}
	if u.User != nil {
		u.User = url.User("REDACTED")
	}
	if u.RawQuery != "" {
		q := u.Query()
		for k := range q {
			q[k] = []string{"REDACTED"}
		}
		u.RawQuery = q.Encode()
	}
	u.Fragment, u.RawFragment = "", ""
	return u.String()
}

// printResult writes the human-readable report: one line per attestation,
// then a summary. Strings from the receipt are quoted when they hold
// anything but printable characters, so a receipt cannot drive the terminal.
func printResult(w io.Writer, res verifier.Result) error {
	if !res.ReceiptValid {
		_, err := fmt.Fprintf(w, "receipt invalid: %s\n", strings.Join(res.Errors, ", "))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tLAYER\tSTATUS\tERROR\tKID")
	verified := 0
	for _, a := range res.Attestations {
		if a.Status == verifier.StatusVerified {
			verified++
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", a.Index, printable(a.Layer), a.Status, orDash(a.Error), orDash(a.KID))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	verdict := "fully verified"
	if !res.FullyVerified {
		verdict = "not fully verified"
	}
	_, err := fmt.Fprintf(w, "receipt valid, %s: %d of %d attestations verified\n", verdict, verified, len(res.Attestations))
	return err
}

func orDash(s *string) string {
	if s == nil {
		return "-"
	}
	return printable(*s)
}

// printable returns s, or s quoted when it has non-printable runes, tabs
// or spaces that would break the table.
func printable(s string) string {
	for _, r := range s {
		if !strconv.IsPrint(r) || r == ' ' {
			return strconv.Quote(s)
		}
	}
	return s
}
