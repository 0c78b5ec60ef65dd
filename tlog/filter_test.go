package tlog

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/keysvc/keysvc/tlog/tlogfmt"
)

func filterHash(i uint64) []byte {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], i)
	h := sha256.Sum256(b[:])
	return h[:]
}

// TestHashFilterGrowsWithoutFalseNegatives: past its first link's
// capacity the filter adds links, every hash added is still reported, and
// absent hashes are mostly refused (the inputs are fixed, so the count is
// too; the bound is the links' 0.1 % each).
func TestHashFilterGrowsWithoutFalseNegatives(t *testing.T) {
	f := newHashFilter(0, 1000)
	const n = 20000
	for i := uint64(0); i < n; i++ {
		f.add(filterHash(i))
	}
	if got := len(f.links); got != 5 { // 1,000 + 2,000 + 4,000 + 8,000 + 16,000 ≥ 20,000
		t.Fatalf("links: %d, want 5", got)
	}
	for i := uint64(0); i < n; i++ {
		if !f.mayHold(filterHash(i)) {
			t.Fatalf("hash %d was added and is not reported: a false negative", i)
		}
	}
	fp := 0
	const absent = 100000
	for i := uint64(n); i < n+absent; i++ {
		if f.mayHold(filterHash(i)) {
			fp++
		}
	}
	if limit := absent * 5 / 1000; fp > limit { // 5 links × 0.1 %
		t.Fatalf("%d false positives in %d absent hashes, want ≤ %d", fp, absent, limit)
	}
	t.Logf("%d false positives in %d absent hashes", fp, absent)
}

// TestHashFilterFirstLink: the first link is sized for twice the hashes
// the index holds at start, and never below the minimum.
func TestHashFilterFirstLink(t *testing.T) {
	if f := newHashFilter(10, 1000); f.capacity != 1000 {
		t.Fatalf("capacity %d, want 1000", f.capacity)
	}
	if f := newHashFilter(3000, 1000); f.capacity != 6000 {
		t.Fatalf("capacity %d, want 6000", f.capacity)
	}
}

// waitFilter waits until the operator's background load installed its
// filter.
func waitFilter(t *testing.T, o *Operator) *hashFilter {
	t.Helper()
	for i := 0; ; i++ {
		o.mu.Lock()
		f := o.seen
		o.mu.Unlock()
		if f != nil {
			return f
		}
		if i > 500 {
			t.Fatal("the artifact-hash filter was never loaded")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func filterSubs(from, n int) []tlogfmt.Submission {
	subs := make([]tlogfmt.Submission, n)
	for i := range subs {
		subs[i] = tlogfmt.Submission{ArtifactType: tlogfmt.ArtifactAttestation, ArtifactHash: "sha256:" + hex.EncodeToString(filterHash(uint64(from+i)))}
	}
	return subs
}

// TestFilterLoadedFromIndex: a restarted operator loads every indexed hash
// into its filter; hashes the follower indexes while the scan runs are
// kept (o.loading) and land in the filter too; a re-submitted hash is
// still one entry.
func TestFilterLoadedFromIndex(t *testing.T) {
	cfg := closedLog(t, 300)
	ctx := context.Background()
	op, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx) //nolint:errcheck // test cleanup
	f := waitFilter(t, op)
	for i := 0; i < 300; i++ {
		if !f.mayHold(filterHash(uint64(i))) {
			t.Fatalf("indexed hash %d is not in the loaded filter", i)
		}
	}
	_, sep, err := op.Add(ctx, filterSubs(7, 1))
	if err != nil || *sep.Entries[0].LeafIndex != 7 {
		t.Fatalf("re-submitted hash 7: %v %+v, want leaf 7", err, sep)
	}

	// As if a load were under way: the follower keeps what it indexes.
	op.mu.Lock()
	op.seen, op.loading = nil, [][]byte{}
	op.mu.Unlock()
	if _, _, err := op.Add(ctx, filterSubs(1000, 50)); err != nil {
		t.Fatal(err)
	}
	if err := op.followOnce(ctx); err != nil {
		t.Fatal(err)
	}
	op.mu.Lock()
	kept := len(op.loading)
	op.mu.Unlock()
	if kept != 50 {
		t.Fatalf("the follower kept %d hashes during the load, want 50", kept)
	}
	if err := op.loadFilter(ctx); err != nil {
		t.Fatal(err)
	}
	f = waitFilter(t, op)
	for i := 0; i < 50; i++ {
		if !f.mayHold(filterHash(uint64(1000 + i))) {
			t.Fatalf("hash %d, indexed during the load, is not in the filter", 1000+i)
		}
	}
	_, sep, err = op.Add(ctx, filterSubs(1010, 1))
	if err != nil || *sep.Entries[0].LeafIndex != 310 {
		t.Fatalf("re-submitted hash 1010: %v %+v, want leaf 310", err, sep)
	}
}

// closedLog makes a log in a new directory with the n entries
// filterSubs(0, n), closes it and returns its configuration.
func closedLog(t *testing.T, n int) Config {
	t.Helper()
	seed, _ := hex.DecodeString("9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60")
	cfg := Config{Dir: t.TempDir(), Origin: "log.example.test/vrp", Signer: ed25519.NewKeyFromSeed(seed), CheckpointInterval: 100 * time.Millisecond}
	ctx := context.Background()
	op, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := op.Add(ctx, filterSubs(0, n)); err != nil {
		t.Fatal(err)
	}
	if err := op.Close(ctx); err != nil {
		t.Fatal(err)
	}
	return cfg
}

// TestAddUnsigned: the in-process Add sequences, deduplicates and refuses
// exactly as Add does and returns the echo Add would sign: entries in
// order, leaf indexes continuing the log, a re-submitted hash at its first
// leaf, with the first submission's logged_at (Add then signs the same).
func TestAddUnsigned(t *testing.T) {
	cfg := closedLog(t, 3)
	ctx := context.Background()
	op, err := New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer op.Close(ctx) //nolint:errcheck // test cleanup
	sep, err := op.AddUnsigned(ctx, append(filterSubs(3, 2), filterSubs(1, 1)...))
	if err != nil {
		t.Fatal(err)
	}
	if len(sep.Entries) != 3 || sep.LogID != "log.example.test/vrp" {
		t.Fatalf("AddUnsigned: %+v", sep)
	}
	for i, want := range []uint64{3, 4, 1} {
		e := sep.Entries[i]
		if e.LeafIndex == nil || *e.LeafIndex != want || e.ArtifactType != tlogfmt.ArtifactAttestation {
			t.Fatalf("entry %d: %+v, want leaf %d", i, e, want)
		}
	}
	_, signed, err := op.Add(ctx, filterSubs(3, 2))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if *signed.Entries[i].LeafIndex != *sep.Entries[i].LeafIndex || signed.Entries[i].LoggedAt != sep.Entries[i].LoggedAt {
			t.Fatalf("entry %d: Add after AddUnsigned gave %+v, want %+v", i, signed.Entries[i], sep.Entries[i])
		}
	}
	bad := filterSubs(10, 1)
	bad[0].ArtifactHash = "sha256:XYZ"
	if _, err := op.AddUnsigned(ctx, bad); !errors.Is(err, ErrInvalid) {
		t.Fatalf("AddUnsigned of a malformed hash: %v, want ErrInvalid", err)
	}
	if _, err := op.AddUnsigned(ctx, nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("AddUnsigned of no entries: %v, want ErrInvalid", err)
	}
}
