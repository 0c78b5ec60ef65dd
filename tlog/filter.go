package tlog

import (
	"github.com/bits-and-blooms/bloom/v3"
)

// Sizing of the artifact-hash filter (hashFilter).
const (
	// filterMinCapacity is the smallest link: 1 Mi hashes, 1.8 MiB at
	// filterFP.
	filterMinCapacity = 1 << 20
	// filterFP is each link's false-positive rate at its capacity.
	filterFP = 0.001
)

// hashFilter answers "certainly not in the index" for an artifact hash
// without reading the state database: a chain of Bloom filters
// (github.com/bits-and-blooms/bloom/v3), each link twice the capacity of
// the one before, so it grows with the log and is never rebuilt. It has no
// false negatives as long as every hash is added before the index can be
// the only place it is found: New loads it from the index, and the
// follower adds each hash it indexes in the same critical section (under
// Operator.mu) that ends the entry's time in the in-flight set. A false
// positive (≤ filterFP per link, so ≤ 0.1 % × links) costs one index
// look-up, as every look-up did before (ADR 0033). Not safe for
// concurrent use: Operator.mu guards it.
type hashFilter struct {
	links    []*bloom.BloomFilter
	n        uint // hashes added to the last link
	capacity uint // of the last link
}

// newHashFilter returns an empty filter whose first link holds at least
// expect hashes (and at least minCapacity).
func newHashFilter(expect, minCapacity uint) *hashFilter {
	f := &hashFilter{}
	f.grow(max(2*expect, minCapacity))
	return f
}

func (f *hashFilter) grow(capacity uint) {
	f.links = append(f.links, bloom.NewWithEstimates(capacity, filterFP))
	f.n, f.capacity = 0, capacity
}

// add records h (the 32 bytes of an artifact hash).
func (f *hashFilter) add(h []byte) {
	if f.n >= f.capacity {
		f.grow(2 * f.capacity)
	}
	f.links[len(f.links)-1].Add(h)
	f.n++
}

// mayHold reports false when h was certainly never added.
func (f *hashFilter) mayHold(h []byte) bool {
	for _, l := range f.links {
		if l.Test(h) {
			return true
		}
	}
	return false
}
