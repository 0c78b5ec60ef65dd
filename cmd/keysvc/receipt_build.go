package main

import (
	"bytes"
	stdjson "encoding/json"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/verifier"
)

// newReceiptBuildCmd is `keysvc receipt build`: a VRP receipt v1 from the
// attestations keysvc's signing API returned (issue 16: sign, build,
// verify with no jq).
func newReceiptBuildCmd() *cobra.Command {
	var property, stay, node, output string
	cmd := &cobra.Command{
		Use:   "build SIGNED.json... --property NAME [--stay FROM/TO] [--node NAME] [-o FILE]",
		Short: "Build a VRP receipt v1 from attestations: sign API responses (their \"attestation\") or attestation objects",
		Long: `Build a VRP receipt envelope v1 (vrp_receipt_version "1.0", subject,
issuer, attestations) from attestations, in the order given. Each SIGNED.json
(or "-" for standard input) holds a signing API response with an
"attestation" member — the answer of POST /v1/keys/NAME/mcp-transport or
/sign, as curl saved it — a bare attestation object, or a JSON array of
either (a batch's results). Each attestation is copied byte for byte
(re-indented): its signature is over the JWS, not over this file.

--property names the subject (subject.property, e.g. the rental's domain),
--stay its stay (subject.stay, e.g. 2026-09-02/2026-09-05; omitted when
empty), --node the issuing node (issuer.node; default: --property).

Verify the result with keysvc verify RECEIPT.json --jwks URL (or
--history URL); add transparency-log proofs with keysvc receipt prove.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var atts []stdjson.RawMessage
			for _, name := range args {
				raw, err := readReceipt(name, cmd.InOrStdin())
				if err != nil {
					return err
				}
				got, err := attestationsIn(raw)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				atts = append(atts, got...)
			}
			if node == "" {
				node = property
			}
			subject := map[string]string{"property": property}
			if stay != "" {
				subject["stay"] = stay
			}
			receipt := struct {
				Version      string               `json:"vrp_receipt_version"`
				Subject      map[string]string    `json:"subject"`
				Issuer       map[string]string    `json:"issuer"`
				Attestations []stdjson.RawMessage `json:"attestations"`
			}{verifier.ReceiptVersion, subject, map[string]string{"node": node}, atts}
			out, err := stdjson.MarshalIndent(receipt, "", "  ")
			if err != nil {
				return err
			}
			out = append(out, '\n')
			if len(out) > verifier.MaxReceiptBytes {
				return fmt.Errorf("the receipt would be %d bytes, more than a verifier reads (%d)", len(out), verifier.MaxReceiptBytes)
			}
			if output != "" {
				if err := writeFileAtomic(output, out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: a VRP receipt v1 with %d attestation(s)\n", output, len(atts))
				return nil
			}
			_, err = cmd.OutOrStdout().Write(out)
			return err
		},
	}
	cmd.Flags().StringVar(&property, "property", "", "the receipt's subject.property, e.g. villaakerlyckan.se (required)")
	cmd.Flags().StringVar(&stay, "stay", "", "the receipt's subject.stay, e.g. 2026-09-02/2026-09-05")
	cmd.Flags().StringVar(&node, "node", "", "the receipt's issuer.node (default: --property)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the receipt to this file (default: standard output)")
	_ = cmd.MarkFlagRequired("property")
	return cmd
}

// attestationsIn returns the attestations in raw: a sign response (its
// "attestation"), an attestation (it has "signature" and "layer"), or an
// array of those (a batch response's items, or a "results" array).
func attestationsIn(raw []byte) ([]stdjson.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) > 0 && raw[0] == '[' {
		var items []stdjson.RawMessage
		if err := stdjson.Unmarshal(raw, &items); err != nil {
			return nil, err
		}
		var out []stdjson.RawMessage
		for i, it := range items {
			got, err := attestationsIn(it)
			if err != nil {
				return nil, fmt.Errorf("item %d: %w", i, err)
			}
			out = append(out, got...)
		}
		return out, nil
	}
	var obj map[string]stdjson.RawMessage
	if err := stdjson.Unmarshal(raw, &obj); err != nil {
		return nil, fmt.Errorf("not a JSON object or array: %w", err)
	}
	if e, ok := obj["error"]; ok {
		return nil, fmt.Errorf("holds an API error, not a signature: %s", e)
	}
	if a, ok := obj["attestation"]; ok {
		return attestationsIn(a)
	}
	if r, ok := obj["results"]; ok {
		return attestationsIn(r)
	}
	if _, sig := obj["signature"]; sig {
		if _, layer := obj["layer"]; layer {
			return []stdjson.RawMessage{bytes.Clone(raw)}, nil
		}
	}
	return nil, fmt.Errorf("no attestation: want a signing API response (with \"attestation\"), an attestation (\"layer\", \"signature\", ...) or an array of them")
}
