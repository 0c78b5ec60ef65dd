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

	"github.com/keysvc/keysvc/verifier"
)

// jwksFetchTimeout bounds fetching --jwks from a URL.
const jwksFetchTimeout = 10 * time.Second

// Exit codes of keysvc verify.
const (
	exitFullyVerified = 0 // every attestation verified
	exitInvalid       = 1 // receipt_valid false (also usage and I/O errors)
	exitPartial       = 2 // receipt valid, not every attestation verified
)

// newVerifyCmd is `keysvc verify RECEIPT.json --jwks FILE|URL [--now RFC3339] [--json]`.
func newVerifyCmd() *cobra.Command {
	var (
		jwksArg string
		nowArg  string
		asJSON  bool
	)
	cmd := &cobra.Command{
		Use:   "verify RECEIPT.json --jwks FILE|URL",
		Short: "Verify a VRP receipt v1 against a JWKS",
		Long: `Verify a VRP receipt envelope v1 (VRP receipt spec v1, D1–D5): each
attestation's validity window, its compact JWS signature (EdDSA or ES256)
over the bytes as received, and its freshness at --now.

RECEIPT.json may be "-" for standard input. --jwks is a JWK Set file or an
http(s) URL (fetched once, 10 s timeout, 1 MiB limit); it verifies every
attestation, whatever its source member names.

Exit status: 0 fully verified; 2 receipt valid but not every attestation
verified; 1 receipt invalid, or a usage or I/O error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			now := time.Now()
			if nowArg != "" {
				t, err := verifier.ParseInstant(nowArg)
				if err != nil {
					return fmt.Errorf("--now %q: want an RFC 3339 date-time such as 2026-06-24T12:00:00Z", nowArg)
				}
				now = t
			}
			receipt, err := readReceipt(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			set, err := loadJWKS(cmd.Context(), jwksArg)
			if err != nil {
				return err
			}
			for _, e := range set.Skipped {
				fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: warning: --jwks %s: skipped %v\n", jwksArg, e)
			}

			res := verifier.VerifyReceipt(cmd.Context(), receipt, verifier.Options{Now: now, Resolve: verifier.StaticJWKS(set)})

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
	cmd.Flags().StringVar(&jwksArg, "jwks", "", "JWK Set: a file path or an http(s) URL (required)")
	cmd.Flags().StringVar(&nowArg, "now", "", "judge freshness at this RFC 3339 instant (default: the current time)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON (the VRP reference verifier's shape)")
	_ = cmd.MarkFlagRequired("jwks")
	return cmd
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

// loadJWKS reads and parses --jwks: an http(s) URL (GET, 200 only) or a
// file, at most verifier.MaxJWKSBytes either way.
func loadJWKS(ctx context.Context, arg string) (*verifier.JWKS, error) {
	if arg == "" {
		return nil, errors.New("--jwks is required")
	}
	var (
		body []byte
		err  error
	)
	if u, perr := url.Parse(arg); perr == nil && (strings.EqualFold(u.Scheme, "http") || strings.EqualFold(u.Scheme, "https")) {
		body, err = fetchJWKS(ctx, u.String())
	} else {
		body, err = readLimited(arg)
	}
	if err != nil {
		return nil, err
	}
	set, err := verifier.ParseJWKS(body)
	if err != nil {
		return nil, fmt.Errorf("--jwks %s: %w", arg, err)
	}
	return set, nil
}

func readLimited(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readCapped(f, path)
}

// readCapped reads r whole, refusing more than verifier.MaxJWKSBytes.
func readCapped(r io.Reader, name string) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, verifier.MaxJWKSBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read JWKS %s: %w", name, err)
	}
	if len(b) > verifier.MaxJWKSBytes {
		return nil, fmt.Errorf("JWKS %s is larger than %d bytes", name, verifier.MaxJWKSBytes)
	}
	return b, nil
}

// fetchJWKS GETs a JWK Set with a 10 s timeout.
func fetchJWKS(ctx context.Context, rawURL string) ([]byte, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, jwksFetchTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, rawURL, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/jwk-set+json, application/json")
	resp, err := (&http.Client{Timeout: jwksFetchTimeout}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch JWKS: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch JWKS %s: HTTP %s", rawURL, resp.Status)
	}
	return readCapped(resp.Body, rawURL)
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
