package tlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
)

// hashIndex is the artifact-hash index: artifact hash → the first log
// entry that carries it (leaf index, artifact_type, logged_at). It is
// derived from the log (the follower builds it from Tessera's entry
// bundles, never the source of truth) and kept in an LSM tree (Pebble,
// <dir>/index): the log's hashes are uniformly random, and a B-tree keyed
// by them (the SQLite table it replaces, ADR 0035) dirtied one page per
// insert, so its writes and page reads grew with the index until they
// were half of the log's CPU. An LSM tree writes a batch sequentially and
// sorts it in the background.
//
// Keys: "f" → next_index (8 bytes, big-endian: entries [0, next_index)
// are indexed); "h" + 32 hash bytes → uvarint leaf index, uvarint
// len(artifact_type), artifact_type, logged_at. The follower writes the
// rows of a range and the new next_index in one batch, so a crash leaves
// a prefix of batches and the follower re-reads the rest. Batches are not
// fsynced: a lost tail is followed again.
type hashIndex struct {
	db *pebble.DB
}

var followerKey = []byte("f")

const hashKeyPrefix = 'h'

func hashKey(h []byte) []byte {
	k := make([]byte, 1+len(h))
	k[0] = hashKeyPrefix
	copy(k[1:], h)
	return k
}

// openIndex opens (creating if missing) the index in dir.
func openIndex(dir string, logger *slog.Logger) (*hashIndex, error) {
	opts := &pebble.Options{
		Logger:       pebbleLogger{logger},
		MemTableSize: 16 << 20,
	}
	for i := range opts.Levels {
		// Most look-ups are for hashes the log has (the filter in front
		// answers the rest); a table filter still spares reading a data
		// block of every table a missing key's range covers.
		opts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	db, err := pebble.Open(filepath.Join(dir, "index"), opts)
	if err != nil {
		return nil, fmt.Errorf("tlog: artifact-hash index: %w", err)
	}
	return &hashIndex{db: db}, nil
}

func (x *hashIndex) close() error { return x.db.Close() }

// nextIndex returns how many log entries the index has followed.
func (x *hashIndex) nextIndex() (uint64, error) {
	v, closer, err := x.db.Get(followerKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	defer closer.Close()
	if len(v) != 8 {
		return 0, fmt.Errorf("tlog: artifact-hash index: follower record of %d bytes", len(v))
	}
	return binary.BigEndian.Uint64(v), nil
}

func encodeIndexed(r indexed) []byte {
	b := make([]byte, 0, 2*binary.MaxVarintLen64+len(r.artifactType)+len(r.loggedAt))
	b = binary.AppendUvarint(b, r.leafIndex)
	b = binary.AppendUvarint(b, uint64(len(r.artifactType)))
	b = append(b, r.artifactType...)
	return append(b, r.loggedAt...)
}

func decodeIndexed(v []byte) (indexed, error) {
	idx, n := binary.Uvarint(v)
	if n <= 0 {
		return indexed{}, errors.New("tlog: artifact-hash index: bad leaf index")
	}
	v = v[n:]
	l, n := binary.Uvarint(v)
	if n <= 0 || uint64(len(v)-n) < l {
		return indexed{}, errors.New("tlog: artifact-hash index: bad artifact_type")
	}
	v = v[n:]
	return indexed{leafIndex: idx, artifactType: string(v[:l]), loggedAt: string(v[l:])}, nil
}

// lookup finds an artifact hash (32 bytes) in the index.
func (x *hashIndex) lookup(h []byte) (indexed, bool, error) {
	v, closer, err := x.db.Get(hashKey(h))
	if errors.Is(err, pebble.ErrNotFound) {
		return indexed{}, false, nil
	}
	if err != nil {
		return indexed{}, false, err
	}
	defer closer.Close()
	r, err := decodeIndexed(v)
	return r, err == nil, err
}

// lookupMany finds artifact hashes (32 bytes each) in the index; the
// result is keyed by string(hash).
func (x *hashIndex) lookupMany(hs [][]byte) (map[string]indexed, error) {
	out := map[string]indexed{}
	for _, h := range hs {
		r, ok, err := x.lookup(h)
		if err != nil {
			return nil, err
		}
		if ok {
			out[string(h)] = r
		}
	}
	return out, nil
}

// eachHash calls fn with every artifact hash in the index (32 bytes; the
// slice is only valid during the call), in key order, from one snapshot.
func (x *hashIndex) eachHash(fn func(h []byte)) error {
	it, err := x.db.NewIter(&pebble.IterOptions{LowerBound: []byte{hashKeyPrefix}, UpperBound: []byte{hashKeyPrefix + 1}})
	if err != nil {
		return err
	}
	for it.First(); it.Valid(); it.Next() {
		fn(it.Key()[1:])
	}
	if err := it.Error(); err != nil {
		it.Close()
		return err
	}
	return it.Close()
}

// follow records rows (entries [from, to) of the log) and moves the
// follower to to, in one batch. An artifact hash already indexed keeps its
// first index (a later duplicate entry in the log is ignored): a row whose
// maybeIndexed[i] is true is looked up first, the others are written
// blind. maybeIndexed[i] (one per row) must be true for every hash already
// in the index, as the operator's filter is (ADR 0034). follow must not
// run concurrently with itself (the operator's followMu).
func (x *hashIndex) follow(from, to uint64, rows []indexRow, maybeIndexed []bool) error {
	if len(maybeIndexed) != len(rows) {
		return errors.New("tlog: index follow: one maybeIndexed per row")
	}
	cur, err := x.nextIndex()
	if err != nil {
		return err
	}
	if cur != from {
		return fmt.Errorf("tlog: index follower at %d, asked to follow from %d", cur, from)
	}
	b := x.db.NewBatch()
	defer b.Close()
	inBatch := make(map[[32]byte]struct{}, len(rows)) // fixed-size keys: no allocation per row
	for i, r := range rows {
		var h [32]byte
		copy(h[:], r.hash)
		if _, dup := inBatch[h]; dup {
			continue
		}
		if maybeIndexed[i] {
			if _, ok, err := x.lookup(r.hash); err != nil {
				return err
			} else if ok {
				continue
			}
		}
		inBatch[h] = struct{}{}
		if err := b.Set(hashKey(r.hash), encodeIndexed(r.indexed), nil); err != nil {
			return err
		}
	}
	var next [8]byte
	binary.BigEndian.PutUint64(next[:], to)
	if err := b.Set(followerKey, next[:], nil); err != nil {
		return err
	}
	return b.Commit(pebble.NoSync)
}

// pebbleLogger sends Pebble's messages to the operator's log. Fatalf is
// Pebble's report of corruption it cannot continue past: logged, then the
// process exits as Pebble's own default logger does.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...any) {
	p.l.Debug("tlog: index: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Errorf(format string, args ...any) {
	p.l.Error("tlog: index: " + fmt.Sprintf(format, args...))
}

func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.l.Error("tlog: index: fatal: " + fmt.Sprintf(format, args...))
	os.Exit(1)
}
