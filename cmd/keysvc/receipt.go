package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/spf13/cobra"

	"github.com/keysvc/keysvc/client"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

func init() { extraCommands = append(extraCommands, newReceiptCmd) }

func newReceiptCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "receipt", Short: "Work on VRP receipts: build one from attestations (build), insert transparency-log proofs (prove)"}
	cmd.AddCommand(newReceiptBuildCmd(), newReceiptProveCmd())
	return cmd
}

// proofSource fetches the tlog member for one attestation signature.
type proofSource func(ctx context.Context, jws string) ([]byte, error)

// errNoProofYet: the source has no proof for the signature (yet).
var errNoProofYet = errors.New("no proof yet")

func newReceiptProveCmd() *cobra.Command {
	cf := &clientFlags{}
	var logURLs []string
	var output string
	var inPlace bool
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "prove RECEIPT.json",
		Short: "Insert each attestation's transparency-log proof (its tlog member) into a VRP receipt",
		Long: `For every attestation of a VRP receipt v1 that carries a signature, fetch
the transparency-log proof of that exact JWS and set it as the
attestation's "tlog" member (replacing one already there): the VRP
Transparency Log v0.1 inclusion proof, the log's Signed Tree Head and the
witness-cosigned C2SP checkpoint of the same tree — what keysvc verify
--history --log-keys [--witness-keys] needs to accept the signature of a
key version revoked later (VRP K4). The proof is anchored at the earliest
tree that includes the leaf and is as well witnessed as the log's newest,
so a receipt proved after a revocation still shows a tree head from before
the compromise.

Proofs come from the keysvc that signed (--server, GET /v1/tlog/proof; the
token needs a signing scope of the key: KEYSVC_TOKEN or --token-file), or
straight from the logs' public endpoints (--log-url, repeatable; no token).
Everything else in the receipt is kept in order (re-indented).

RECEIPT.json may be "-" for standard input. The result goes to standard
output, to --output, or back into the file with --in-place.

Exit status: 0 every signed attestation got a proof; 2 some did not (no log
has them yet — retry, or --wait — or another node signed them; each is named
on standard error); 1 error.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if inPlace && (output != "" || args[0] == "-") {
				return errors.New("--in-place writes back to RECEIPT.json: not with --output or standard input")
			}
			receipt, err := readReceipt(args[0], cmd.InOrStdin())
			if err != nil {
				return err
			}
			if len(receipt) > verifier.MaxReceiptBytes {
				return fmt.Errorf("receipt %s is larger than %d bytes", args[0], verifier.MaxReceiptBytes)
			}
			var src proofSource
			if len(logURLs) > 0 {
				var logs []tlogclient.Log
				for _, u := range logURLs {
					l, err := tlogclient.NewHTTPLog(u)
					if err != nil {
						return fmt.Errorf("--log-url: %w", err)
					}
					logs = append(logs, l)
				}
				src = func(ctx context.Context, jws string) ([]byte, error) {
					b, err := tlogclient.Prove(ctx, logs, tlogclient.HashArtifact(jws))
					if errors.Is(err, tlogclient.ErrNotFound) {
						return nil, errNoProofYet
					}
					return b, err
				}
			} else {
				tok, err := cf.token()
				if err != nil {
					return err
				}
				c := client.New(cf.server, tok)
				src = func(ctx context.Context, jws string) ([]byte, error) {
					b, err := c.TlogProof(ctx, jws)
					var ce *client.Error
					if errors.As(err, &ce) && ce.Status == http.StatusNotFound && ce.Code == "tlog_not_found" {
						return nil, errNoProofYet
					}
					return b, err
				}
			}
			out, missing, err := proveReceipt(cmd.Context(), receipt, src, wait)
			if err != nil {
				return err
			}
			for _, m := range missing {
				fmt.Fprintf(cmd.ErrOrStderr(), "keysvc: attestation %d: no proof: %v\n", m.index, m.err)
			}
			file := output
			if inPlace {
				file = args[0]
			}
			if file != "" {
				err = writeFileAtomic(file, out)
			} else {
				_, err = cmd.OutOrStdout().Write(out)
			}
			if err != nil {
				return err
			}
			if file != "" {
				// Said on stderr, as receipt build does: standard output
				// stays the receipt's alone when that is where it goes.
				var doc struct {
					Attestations []jsontext.Value `json:"attestations"`
				}
				_ = json.Unmarshal(out, &doc)
				fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s: %d of %d attestation(s) proved\n", file, len(doc.Attestations)-len(missing), len(doc.Attestations))
			}
			if len(missing) > 0 {
				return exitError{exitPartial}
			}
			return nil
		},
	}
	cf.register(cmd)
	cmd.Flags().StringArrayVar(&logURLs, "log-url", nil, "ask this transparency log (its base URL) directly instead of --server (repeatable; the first that has the leaf answers)")
	cmd.Flags().StringVarP(&output, "output", "o", "", "write the proved receipt to this file (default: standard output)")
	cmd.Flags().BoolVar(&inPlace, "in-place", false, "write the proved receipt back to RECEIPT.json")
	cmd.Flags().DurationVar(&wait, "wait", 0, "keep asking for proofs no log has yet for up to this long (a log includes a leaf within its maximum merge delay)")
	return cmd
}

// missingProof is an attestation left without a proof.
type missingProof struct {
	index int
	err   error
}

// proveReceipt fetches a proof for every attestation with a signature and
// returns the receipt with them inserted, and the attestations left
// without one.
func proveReceipt(ctx context.Context, receipt []byte, src proofSource, wait time.Duration) ([]byte, []missingProof, error) {
	var doc struct {
		Attestations []jsontext.Value `json:"attestations"`
	}
	if err := json.Unmarshal(receipt, &doc); err != nil {
		return nil, nil, fmt.Errorf("receipt: %w", err)
	}
	if len(doc.Attestations) == 0 {
		return nil, nil, errors.New("receipt: no attestations array")
	}
	sigs := make([]string, len(doc.Attestations))
	for i, a := range doc.Attestations {
		var att struct {
			Signature any `json:"signature"`
		}
		if err := json.Unmarshal(a, &att); err == nil {
			sigs[i], _ = att.Signature.(string)
		}
	}
	proofs := make([][]byte, len(sigs))
	deadline := time.Now().Add(wait)
	var missing []missingProof
	for {
		missing = missing[:0]
		for i, sig := range sigs {
			if sig == "" || proofs[i] != nil {
				continue
			}
			rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			p, err := src(rctx, sig)
			cancel()
			if err != nil {
				missing = append(missing, missingProof{i, err})
				continue
			}
			if !jsontext.Value(p).IsValid() {
				return nil, nil, fmt.Errorf("attestation %d: the proof is not JSON", i)
			}
			proofs[i] = p
		}
		retry := false
		for _, m := range missing {
			retry = retry || errors.Is(m.err, errNoProofYet)
		}
		if !retry || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	out, err := insertTlogs(receipt, proofs)
	return out, missing, err
}

// insertTlogs rewrites receipt with proofs[i], when set, as the tlog member
// of attestation i (an existing tlog member is dropped); every other member
// keeps its place and value. The result is indented with two spaces.
func insertTlogs(receipt []byte, proofs [][]byte) ([]byte, error) {
	var buf bytes.Buffer
	dec := jsontext.NewDecoder(bytes.NewReader(receipt))
	enc := jsontext.NewEncoder(&buf, jsontext.WithIndent("  "))
	copyValue := func() error {
		v, err := dec.ReadValue()
		if err != nil {
			return err
		}
		return enc.WriteValue(v)
	}
	step := func(want jsontext.Kind) error {
		tok, err := dec.ReadToken()
		if err != nil {
			return err
		}
		if tok.Kind() != want {
			return fmt.Errorf("receipt: want %v at %s", want, dec.StackPointer())
		}
		return enc.WriteToken(tok)
	}
	err := func() error {
		if err := step('{'); err != nil {
			return err
		}
		for dec.PeekKind() != '}' {
			tok, err := dec.ReadToken()
			if err != nil {
				return err
			}
			name := tok.String()
			if err := enc.WriteToken(tok); err != nil {
				return err
			}
			if name != "attestations" || dec.PeekKind() != '[' {
				if err := copyValue(); err != nil {
					return err
				}
				continue
			}
			if err := step('['); err != nil {
				return err
			}
			for i := 0; dec.PeekKind() != ']'; i++ {
				if dec.PeekKind() != '{' || i >= len(proofs) || proofs[i] == nil {
					if err := copyValue(); err != nil {
						return err
					}
					continue
				}
				if err := step('{'); err != nil {
					return err
				}
				for dec.PeekKind() != '}' {
					n, err := dec.ReadToken()
					if err != nil {
						return err
					}
					member := n.String() // n is void after the next read
					v, err := dec.ReadValue()
					if err != nil {
						return err
					}
					if member == "tlog" {
						continue
					}
					if err := enc.WriteToken(jsontext.String(member)); err != nil {
						return err
					}
					if err := enc.WriteValue(v); err != nil {
						return err
					}
				}
				if err := enc.WriteToken(jsontext.String("tlog")); err != nil {
					return err
				}
				if err := enc.WriteValue(proofs[i]); err != nil {
					return err
				}
				if err := step('}'); err != nil {
					return err
				}
			}
			if err := step(']'); err != nil {
				return err
			}
		}
		if err := step('}'); err != nil {
			return err
		}
		if _, err := dec.ReadToken(); err != io.EOF {
			return errors.New("receipt: data after the JSON object")
		}
		return nil
	}()
	if err != nil {
		return nil, fmt.Errorf("receipt: %w", err)
	}
	return buf.Bytes(), nil
}

// writeFileAtomic writes b to path through a temporary file in the same
// directory (mode 0600), fsynced and renamed into place; the directory is
// fsynced after the rename, so the new file survives a power loss.
func writeFileAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+"-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return err
	}
	d, err := os.Open(filepath.Dir(path))
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
