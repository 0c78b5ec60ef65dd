// Package tlogtest holds test helpers for logs run by package tlog:
// Tessera's own log checker (github.com/transparency-dev/tessera/fsck, the
// library behind cmd/fsck) and a real litewitness process
// (filippo.io/torchwood/cmd/litewitness) as an independent C2SP
// tlog-witness.
package tlogtest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/transparency-dev/merkle/rfc6962"
	"github.com/transparency-dev/tessera/api"
	"github.com/transparency-dev/tessera/client"
	"github.com/transparency-dev/tessera/fsck"
	"golang.org/x/mod/sumdb/note"
)

// Fsck runs Tessera's log checker over the log an Operator keeps in dir
// (its Config.Dir) with the log's verifier key vkey: it verifies the
// checkpoint signature, re-hashes every entry bundle and checks every tile
// and the root. The test fails on any error.
func Fsck(t testing.TB, dir, vkey string) {
	t.Helper()
	if err := FsckDir(filepath.Join(dir, "log"), vkey); err != nil {
		t.Errorf("fsck: %v", err)
	}
}

// FsckDir is Fsck on a Tessera POSIX directory.
func FsckDir(logDir, vkey string) error {
	v, err := note.NewVerifier(vkey)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	f := fsck.New(v.Name(), v, client.FileFetcher{Root: logDir}, leafHashes, fsck.Opts{N: 2})
	return f.Check(ctx)
}

// leafHashes is cmd/fsck's default bundle hasher: the RFC 6962 leaf hash of
// each entry of a C2SP tlog-tiles entry bundle.
func leafHashes(bundle []byte) ([][]byte, error) {
	eb := &api.EntryBundle{}
	if err := eb.UnmarshalText(bundle); err != nil {
		return nil, fmt.Errorf("unmarshal: %v", err)
	}
	r := make([][]byte, 0, len(eb.Entries))
	for _, e := range eb.Entries {
		h := rfc6962.DefaultHasher.HashLeaf(e)
		r = append(r, h[:])
	}
	return r, nil
}
