package tlog

import (
	"crypto/sha256"
	"encoding/binary"
	"testing"
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
