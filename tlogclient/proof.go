package tlogclient

import (
	"context"
	"errors"

	"github.com/go-json-experiment/json"
	"golang.org/x/mod/sumdb/note"
)

// archivePage and archivePages bound the archive scan of Prove: at most
// 1,000 tree heads after the leaf.
const (
	archivePage  = 100
	archivePages = 10
)

// Proof returns the tlog member for jws (the compact JWS exactly as issued)
// from the first configured log that has its leaf; see Prove.
func (c *Client) Proof(ctx context.Context, jws string) ([]byte, error) {
	logs := make([]Log, len(c.logs))
	for i, ls := range c.logs {
		logs[i] = ls.log
	}
	return Prove(ctx, logs, HashArtifact(jws))
}

// Prove returns, from the first of logs that has the leaf of hash, its
// tlog member (verifier.VerifyTlog's shape with the witnessed checkpoint)
// anchored at the earliest tree that both includes the leaf and carries as
// many checkpoint signatures as the log's newest proof: the earliest
// witnessed anchor, so that a receipt proved after its key version was
// revoked still shows a tree head from before the compromise (VRP K4).
// The member comes from the log byte for byte; the node signs nothing.
//
// It asks the log for its proof (newest witnessed tree), then walks the
// STH archive from the leaf's index on (at most 1,000 tree heads) for the
// first tree as well witnessed, and asks for the proof in that tree. If
// the archive is unavailable or holds no earlier such tree, the newest
// proof is returned. ErrNotFound when no log has the leaf (yet).
func Prove(ctx context.Context, logs []Log, hash [32]byte) ([]byte, error) {
	var firstErr error
	for _, l := range logs {
		p, err := earliestProof(ctx, l, hash)
		if err == nil {
			return p, nil
		}
		if firstErr == nil || errors.Is(firstErr, ErrNotFound) && !errors.Is(err, ErrNotFound) {
			firstErr = err
		}
	}
	return nil, firstErr
}

func earliestProof(ctx context.Context, l Log, hash [32]byte) ([]byte, error) {
	newest, err := l.Proof(ctx, hash, 0)
	if err != nil {
		return nil, err
	}
	var m struct {
		LeafIndex  uint64 `json:"leaf_index"`
		TreeSize   uint64 `json:"tree_size"`
		Checkpoint string `json:"checkpoint"`
	}
	if json.Unmarshal(newest, &m) != nil || m.TreeSize <= m.LeafIndex {
		return newest, nil // the verifier judges it
	}
	want := signatureCount(m.Checkpoint)
	after := m.LeafIndex // every tree of more than leaf_index leaves includes the leaf
	for range archivePages {
		trees, err := l.Archive(ctx, after, archivePage)
		if err != nil || len(trees) == 0 {
			return newest, nil
		}
		for _, t := range trees {
			if t.TreeSize >= m.TreeSize {
				return newest, nil
			}
			if t.TreeSize <= after || signatureCount(t.Checkpoint) < want {
				continue
			}
			if p, err := l.Proof(ctx, hash, t.TreeSize); err == nil {
				return p, nil
			}
		}
		after = trees[len(trees)-1].TreeSize
	}
	return newest, nil
}

// signatureCount returns the number of distinct signature lines of a C2SP
// signed note (the log's and the witnesses'), 0 when it does not parse. It
// verifies nothing: it only ranks trees; the verifier checks the
// signatures it counts.
func signatureCount(signedNote string) int {
	_, err := note.Open([]byte(signedNote), note.VerifierList())
	var u *note.UnverifiedNoteError
	if errors.As(err, &u) {
		return len(u.Note.UnverifiedSigs)
	}
	return 0
}
