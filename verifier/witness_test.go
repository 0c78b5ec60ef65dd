package verifier

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/merkle/testonly"
	"golang.org/x/mod/sumdb/note"

	"github.com/keysvc/keysvc/tlog/tlogtest"
)

// noteSigner is x/mod's note signer for an Ed25519 key under name.
func noteSigner(t testing.TB, name string, priv ed25519.PrivateKey) note.Signer {
	t.Helper()
	vkey, err := note.NewEd25519VerifierKey(name, priv.Public().(ed25519.PublicKey))
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(vkey, "+")
	skey := "PRIVATE+KEY+" + name + "+" + parts[1] + "+" + base64.StdEncoding.EncodeToString(append([]byte{1}, priv.Seed()...))
	s, err := note.NewSigner(skey)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// testWitness is a witness key for cosignature/v1 (C2SP tlog-cosignature)
// written out from the specification (tlogtest.Cosigner), so the
// verifier's use of transparency-dev/formats and x/mod is checked against
// it.
type testWitness struct{ tlogtest.Cosigner }

func newTestWitness(name string, seed byte) testWitness {
	return testWitness{tlogtest.NewCosigner(name, seed)}
}

// as is the same witness key under another name.
func (w testWitness) as(name string) testWitness { return testWitness{w.As(name)} }

func (w testWitness) key(t testing.TB) *WitnessKey {
	t.Helper()
	k, err := ParseWitnessKey(w.VKey())
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// cosign returns the signature line of a cosignature at ts over the
// checkpoint body: "cosignature/v1\ntime <ts>\n" + body, signed with
// Ed25519, encoded as key hash || ts (8 bytes, big-endian) || signature.
func (w testWitness) cosign(body string, ts time.Time) string { return w.Line(body, ts) }

// checkpointFor returns the checkpoint of the tlog member tl (tree of the
// member's size and root) signed with logKey under name origin, followed by
// the extra signature lines.
func checkpointFor(t testing.TB, origin string, logKey edKey, size int, root []byte, lines ...string) string {
	t.Helper()
	body := fmt.Sprintf("%s\n%d\n%s\n", origin, size, base64.StdEncoding.EncodeToString(root))
	signed, err := note.Sign(&note.Note{Text: body}, noteSigner(t, origin, logKey.priv))
	if err != nil {
		t.Fatal(err)
	}
	return string(signed) + strings.Join(lines, "")
}

// TestLifecycleWitnessedTlog pins the witness rules of K4: with
// WitnessesRequired K, a revoked version's signature needs a tlog proof
// whose checkpoint (same log key, same tree as the STH) carries K valid
// cosignatures of distinct trusted witnesses, each made strictly before
// vrp_compromised_at; any defect of the checkpoint is key_revoked.
func TestLifecycleWitnessedTlog(t *testing.T) {
	f := newLCFixture(t)
	sig := f.revoked.sign(`{"offer_id":"o1"}`)
	const signedAt = "2026-03-10T10:00:00Z"
	w1, w2, rogue := newTestWitness("witness.one", 1), newTestWitness("witness.two", 2), newTestWitness("witness.rogue", 3)
	alias := w1.as("witness.alias")
	spec := tlogSpec{logKey: f.log, logID: testLogID, signature: sig, index: 5, size: 8,
		loggedAt: "2026-03-10T10:00:01Z", sthAt: "2026-03-10T10:05:00Z"}
	tl, root := buildTlog(t, spec)
	body := fmt.Sprintf("%s\n%d\n%s\n", testLogID, 8, base64.StdEncoding.EncodeToString(root))
	early := mustTime(t, "2026-03-10T10:05:02Z")
	comp := mustTime(t, compromisedAt)
	lastSecond := comp.Add(-time.Second) // 23:59:59, the second before the compromise ends at it
	withCP := func(cp any) map[string]any {
		m := map[string]any{}
		for k, v := range tl {
			m[k] = v
		}
		m["checkpoint"] = cp
		return m
	}
	cp := func(lines ...string) map[string]any {
		return withCP(checkpointFor(t, testLogID, f.log, 8, root, lines...))
	}
	tampered := w2.cosign(body, early)
	tampered = tampered[:len(tampered)-6] + "AAAA=\n" // corrupt the signature bytes
	bothTrusted := func(k int) func(Options) Options {
		return func(o Options) Options {
			o.Witnesses, o.WitnessesRequired = []*WitnessKey{w1.key(t), w2.key(t)}, k
			return o
		}
	}
	otherRoot := sha256.Sum256([]byte("other tree"))

	cases := []struct {
		name string
		tlog map[string]any
		opts func(Options) Options
		want string
	}{
		{"no witnesses asked, no checkpoint", tl, nil, ""},
		{"no witnesses asked, checkpoint with cosignatures", cp(w1.cosign(body, early)), nil, ""},
		{"1 of 2, both cosigned early", cp(w1.cosign(body, early), w2.cosign(body, early)), bothTrusted(1), ""},
		{"2 of 2, both cosigned early", cp(w1.cosign(body, early), w2.cosign(body, early)), bothTrusted(2), ""},
		{"2 of 2, one cosigned after the compromise", cp(w1.cosign(body, early), w2.cosign(body, comp.Add(time.Hour))), bothTrusted(2), CodeKeyRevoked},
		{"1 of 2, one cosigned after the compromise", cp(w1.cosign(body, early), w2.cosign(body, comp.Add(time.Hour))), bothTrusted(1), ""},
		{"cosigned in the last second before the compromise", cp(w1.cosign(body, lastSecond)), bothTrusted(1), ""},
		{"cosigned in the second of the compromise", cp(w1.cosign(body, comp)), bothTrusted(1), CodeKeyRevoked},
		{"2 of 2, one witness twice", cp(w1.cosign(body, early), w1.cosign(body, early.Add(time.Second))), bothTrusted(2), CodeKeyRevoked},
		// A cosignature/v1 signature does not cover the witness's name:
		// witness.one's line copied under another name is still one
		// witness, even when that public key is trusted under both names
		// (ParseWitnessKeys refuses such a list; Options built in code
		// are counted by public key).
		{"2 of 2, one witness's line under a second name", cp(w1.cosign(body, early), alias.cosign(body, early)),
			func(o Options) Options {
				o.Witnesses, o.WitnessesRequired = []*WitnessKey{w1.key(t), alias.key(t)}, 2
				return o
			}, CodeKeyRevoked},
		{"1 of 1, the line under the second name", cp(alias.cosign(body, early)),
			func(o Options) Options {
				o.Witnesses, o.WitnessesRequired = []*WitnessKey{w1.key(t), alias.key(t)}, 1
				return o
			}, ""},
		{"1 of 2, only an untrusted witness", cp(rogue.cosign(body, early)), bothTrusted(1), CodeKeyRevoked},
		{"1 of 2, untrusted and trusted", cp(rogue.cosign(body, early), w1.cosign(body, early)), bothTrusted(1), ""},
		{"witnesses asked, no checkpoint", tl, bothTrusted(1), CodeKeyRevoked},
		{"a trusted witness's cosignature does not verify", cp(w1.cosign(body, early), tampered), bothTrusted(1), CodeKeyRevoked},
		{"cosignature over another tree", cp(w1.cosign(strings.Replace(body, "\n8\n", "\n9\n", 1), early)), bothTrusted(1), CodeKeyRevoked},
		{"more witnesses required than trusted", cp(w1.cosign(body, early), w2.cosign(body, early)),
			func(o Options) Options { o.Witnesses, o.WitnessesRequired = []*WitnessKey{w1.key(t)}, 2; return o }, CodeKeyRevoked},
		{"checkpoint of another size", withCP(checkpointFor(t, testLogID, f.log, 9, root, w1.cosign(body, early))), bothTrusted(1), CodeKeyRevoked},
		{"checkpoint of another root", withCP(checkpointFor(t, testLogID, f.log, 8, otherRoot[:])), nil, CodeKeyRevoked},
		{"checkpoint signed by another key", withCP(checkpointFor(t, testLogID, f.rogueLog, 8, root)), nil, CodeKeyRevoked},
		{"checkpoint of another origin", withCP(checkpointFor(t, "did:web:other.example", f.log, 8, root)), nil, CodeKeyRevoked},
		{"checkpoint without the log's signature", withCP(body + "\n" + w1.cosign(body, early)), bothTrusted(1), CodeKeyRevoked},
		{"checkpoint not a string", withCP(8), nil, CodeKeyRevoked},
		{"checkpoint not a note", withCP("not a note"), nil, CodeKeyRevoked},
		{"consistency check passes", cp(w1.cosign(body, early)),
			func(o Options) Options {
				o = bothTrusted(1)(o)
				o.Consistency = func(_ context.Context, a *TlogAnchor) error {
					if a.TreeSize != 8 || len(a.Cosignatures) != 1 || !a.Checkpoint {
						return fmt.Errorf("anchor %+v", a)
					}
					return nil
				}
				return o
			}, ""},
		{"consistency check fails", cp(w1.cosign(body, early)),
			func(o Options) Options {
				o = bothTrusted(1)(o)
				o.Consistency = func(context.Context, *TlogAnchor) error { return ErrInconsistent }
				return o
			}, CodeKeyRevoked},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := attAt(t, "transport", sig, signedAt)
			a["tlog"] = c.tlog
			opts := f.opts()
			if c.opts != nil {
				opts = c.opts(opts)
			}
			got := verifyFresh(t, a, opts)
			if c.want == "" {
				checkAtt(t, got, want(0, "transport", StatusVerified, "", f.revoked.kid))
			} else {
				checkAtt(t, got, want(0, "transport", StatusInvalid, c.want, f.revoked.kid))
			}
		})
	}

	// The anchor reports the verified cosignatures with their times.
	raw := mustJSON(t, cp(w1.cosign(body, early), rogue.cosign(body, early), w2.cosign(body, lastSecond)))
	anchor, err := VerifyTlog(raw, sig, f.logKeys, w1.key(t), w2.key(t))
	if err != nil {
		t.Fatal(err)
	}
	if !anchor.Checkpoint || len(anchor.Cosignatures) != 2 ||
		anchor.Cosignatures[0].Witness.Name != "witness.one" || !anchor.Cosignatures[0].Timestamp.Equal(early) ||
		anchor.Cosignatures[1].Witness.Name != "witness.two" || !anchor.Cosignatures[1].Timestamp.Equal(lastSecond) {
		t.Fatalf("anchor %+v", anchor)
	}
}

func TestParseWitnessKeys(t *testing.T) {
	w1, w2 := newTestWitness("witness.one", 1), newTestWitness("witness.two", 2)
	ks, err := ParseWitnessKeys([]byte("# trusted witnesses\n\n" + w1.VKey() + "\n  " + w2.VKey() + "  \n"))
	if err != nil || len(ks) != 2 || ks[0].Name != "witness.one" || ks[1].VKey != w2.VKey() {
		t.Fatalf("ParseWitnessKeys: %v %v", ks, err)
	}
	for name, text := range map[string]string{
		"duplicate": w1.VKey() + "\n" + w1.VKey() + "\n",
		// One public key under two names is one witness (a cosignature/v1
		// line can be copied under any name).
		"one public key under two names": w1.VKey() + "\n" + w1.as("witness.alias").VKey() + "\n",
		"garbage":                        "witness.one+00000000+!!!\n",
		"bad alg":                        fmt.Sprintf("witness.one+%08x+%s\n", w1.KeyHash(), base64.StdEncoding.EncodeToString(append([]byte{7}, w1.Public()...))),
	} {
		if _, err := ParseWitnessKeys([]byte(text)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestVerifyConsistency checks VerifyConsistency on trees built with
// transparency-dev/merkle's reference tree.
func TestVerifyConsistency(t *testing.T) {
	tree := testonly.New(rfc6962.DefaultHasher)
	for i := 0; i < 13; i++ {
		tree.AppendData(fmt.Appendf(nil, "leaf %d", i))
	}
	anchor := &TlogAnchor{LogID: testLogID, TreeSize: 5, RootHash: tree.HashAt(5)}
	newer := &SignedTreeHead{LogID: testLogID, TreeSize: 13, RootHash: tree.HashAt(13)}
	p, err := tree.ConsistencyProof(5, 13)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyConsistency(anchor, newer, p); err != nil {
		t.Fatalf("consistent trees: %v", err)
	}
	if err := VerifyConsistency(anchor, &SignedTreeHead{LogID: testLogID, TreeSize: 5, RootHash: tree.HashAt(5)}, nil); err != nil {
		t.Fatalf("same tree: %v", err)
	}
	forked := testonly.New(rfc6962.DefaultHasher)
	for i := 0; i < 13; i++ {
		d := fmt.Appendf(nil, "leaf %d", i)
		if i == 2 {
			d = []byte("rewritten")
		}
		forked.AppendData(d)
	}
	fp, _ := forked.ConsistencyProof(5, 13)
	for name, c := range map[string]struct {
		newer *SignedTreeHead
		proof [][]byte
	}{
		"fork":                  {&SignedTreeHead{LogID: testLogID, TreeSize: 13, RootHash: forked.HashAt(13)}, fp},
		"wrong proof":           {newer, fp},
		"smaller":               {&SignedTreeHead{LogID: testLogID, TreeSize: 4, RootHash: tree.HashAt(4)}, nil},
		"other log":             {&SignedTreeHead{LogID: "did:web:other", TreeSize: 13, RootHash: tree.HashAt(13)}, p},
		"same size, other root": {&SignedTreeHead{LogID: testLogID, TreeSize: 5, RootHash: forked.HashAt(5)}, nil},
	} {
		if err := VerifyConsistency(anchor, c.newer, c.proof); !errors.Is(err, ErrInconsistent) {
			t.Errorf("%s: %v, want ErrInconsistent", name, err)
		}
	}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
