package tlogclient

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The spool (ADR 0024) is a per-replica alternative to the outbox in key
// history: an append-only file of fixed-size records under the data
// directory, one per leaf. With SpoolSyncWrite a signing request copies
// its records into a shared memory mapping of the current segment
// (mmap(2) MAP_SHARED over blocks reserved with fallocate(2)): once the
// copy is done the records are in the kernel's page cache, as after a
// write(2), with no system call and no hand-off to a writer (ADR 0033); a
// batch's records (spoolWriteAtRecords or more) go in with one pwrite(2)
// per segment at the same offsets instead, which costs less than
// faulting the mapping's pages in one by one.
// With SpoolSyncFdatasync (or where fallocate is not
// supported) a writer goroutine group-commits them with write(2) and
// fdatasync(2), and the request waits for its group. Either way a request
// never waits for a database or a log; one sender per log reads the file
// in order and submits it in batches; each log's delivered position (its
// cursor) is kept in a small file next to the segments, and segments
// every log has passed are deleted.
//
// Record layout (SpoolRecordSize = 64 bytes, integers big-endian):
//
//	[0:4]   magic "VRS1"
//	[4]     artifact type (1 vrp_attestation, 2 vrp_signed_offer,
//	        3 vrp_status_event, 4 vrp_receipt, 5 vrp_spec)
//	[5:8]   zero
//	[8:16]  enqueued at, Unix nanoseconds
//	[16:48] artifact hash (SHA-256 of the artifact's exact bytes)
//	[48:60] zero
//	[60:64] CRC-32C (Castagnoli) of [0:60]
//
// Records are numbered from 0 for the life of the spool; segment file
// spool-<16 hex digits of k>.bin holds records k·SegmentRecords up to
// (k+1)·SegmentRecords − 1.
const SpoolRecordSize = 64

// Spool sync modes: how a group commit reaches the disk before the
// requests in it are answered.
const (
	// SpoolSyncWrite: records are copied into a shared mapping of the
	// segment (ADR 0033; one write(2) per group where fallocate is not
	// supported). They are in the kernel's page cache when the request is
	// answered: they survive the process being killed (kill -9), not a
	// kernel crash or power loss.
	SpoolSyncWrite = "write"
	// SpoolSyncFdatasync: write(2) and fdatasync(2) per group (a new
	// segment also fsyncs the directory): the records survive a power loss.
	SpoolSyncFdatasync = "fdatasync"
)

const (
	spoolMagic          = "VRS1"
	defaultSegmentRecs  = 1 << 16 // 4 MiB segments
	spoolLockFile       = "LOCK"
	spoolCursorPrefix   = "cursor-"
	spoolSegmentPrefix  = "spool-"
	spoolSegmentSuffix  = ".bin"
	spoolCursorInterval = 250 * time.Millisecond
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var artifactCodes = []string{"", ArtifactAttestation, ArtifactSignedOffer, ArtifactStatusEvent, ArtifactReceipt, ArtifactSpec}

func artifactCode(t string) byte {
	for i, a := range artifactCodes {
		if i > 0 && a == t {
			return byte(i)
		}
	}
	return 0
}

// SpoolOptions configure OpenSpool.
type SpoolOptions struct {
	// Dir is the spool's directory (created when missing, mode 0700). One
	// process at a time may hold it (an flock on Dir/LOCK).
	Dir string
	// Sync is SpoolSyncWrite (default) or SpoolSyncFdatasync.
	Sync string
	// SegmentRecords is the number of records per segment file (default
	// 65,536: 4 MiB).
	SegmentRecords int
	Logger         *slog.Logger
	// Existing opens only a spool that is there: Dir must hold the LOCK
	// file every opened spool keeps, or a segment. Otherwise OpenSpool
	// fails with ErrNotASpool and creates nothing (`keysvc tlog drain`: an
	// unmounted or mistyped path must not read as an empty spool).
	Existing bool
}

// ErrNotASpool: SpoolOptions.Existing was set and Dir holds no spool.
var ErrNotASpool = errors.New("tlogclient: no spool at")

// Spool is an open spool directory. Open it with OpenSpool, give it to
// New in Config.Spool, Close it after the Client's Run returned.
type Spool struct {
	dir     string
	sync    bool
	segRecs uint64
	log     *slog.Logger
	lock    *os.File

	mu      sync.Mutex
	pending []byte    // encoded records not yet written
	gen     *spoolGen // the group the pending records belong to
	next    uint64    // number of the next record appended
	broken  error     // a write failed: every later append fails
	kick    chan struct{}
	closing chan struct{}
	stopped chan struct{}

	// Mapped mode (SpoolSyncWrite): the current segment, mapped; under mu.
	mapped bool
	mfile  *os.File
	mseg   uint64
	mdata  []byte
	// scratch holds the records of a writeAtMapped call (under mu).
	scratch []byte

	// Writer state (the writer goroutine only).
	wfile   *os.File
	wseg    uint64
	written uint64 // records written (and synced, when asked)

	durable atomic.Uint64 // records readable by the senders
	first   atomic.Uint64 // first record still on disk (segment start)
	wakeMu  sync.Mutex
	wakes   []chan struct{}
	// parked counts senders blocked on their wake channel (waitWake): a
	// mapped append wakes only when one is, instead of taking wakeMu for
	// every record while the senders are busy or gathering a batch.
	parked atomic.Int32

	badRecords atomic.Int64
	groupHook  func(rows int) // metrics: records per group commit
}

type spoolGen struct {
	done chan struct{}
	err  error
}

// OpenSpool opens (or creates) the spool in opts.Dir, takes its lock,
// and recovers it: a torn or invalid tail of the last segment (a write cut
// short by a crash) is truncated away. The records it holds are delivered
// again from each log's cursor once a Client runs.
func OpenSpool(opts SpoolOptions) (*Spool, error) {
	if opts.Dir == "" {
		return nil, errors.New("tlogclient: spool: no directory")
	}
	switch opts.Sync {
	case "", SpoolSyncWrite, SpoolSyncFdatasync:
	default:
		return nil, fmt.Errorf("tlogclient: spool sync %q: want %s or %s", opts.Sync, SpoolSyncWrite, SpoolSyncFdatasync)
	}
	if opts.SegmentRecords <= 0 {
		opts.SegmentRecords = defaultSegmentRecs
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Existing {
		if err := isSpool(opts.Dir); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(opts.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("tlogclient: spool: %w", err)
	}
	lock, err := os.OpenFile(filepath.Join(opts.Dir, spoolLockFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("tlogclient: spool: %w", err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return nil, fmt.Errorf("tlogclient: spool %s is in use by another process (one spool per replica): %w", opts.Dir, err)
	}
	s := &Spool{dir: opts.Dir, sync: opts.Sync == SpoolSyncFdatasync, segRecs: uint64(opts.SegmentRecords), log: opts.Logger, lock: lock,
		gen: &spoolGen{done: make(chan struct{})}, kick: make(chan struct{}, 1), closing: make(chan struct{}), stopped: make(chan struct{})}
	if err := s.recover(); err != nil {
		lock.Close()
		return nil, err
	}
	if !s.sync {
		// Map the segment the next record goes to; a file system without
		// fallocate(2) gets the writer instead (no mapping over holes: a
		// full disk would be a SIGBUS, not an error).
		s.mapped = true
		if err := s.mapSegment(s.next / s.segRecs); err != nil {
			s.mapped = false
			if !errors.Is(err, syscall.EOPNOTSUPP) {
				lock.Close()
				return nil, fmt.Errorf("tlogclient: spool: %w", err)
			}
			s.log.Info("transparency log: spool: fallocate is not supported here; records are written with write(2) by a group committer", "dir", s.dir)
		}
	}
	if s.mapped {
		close(s.stopped)
	} else {
		go s.writeLoop()
	}
	return s, nil
}

// mapSegment makes segment k the mapped one: its file is created if
// missing, its blocks reserved to the full segment size (fallocate), and
// mapped shared read-write. The previous segment, full, is unmapped.
// Called with mu held (or before the spool is shared).
func (s *Spool) mapSegment(k uint64) error {
	if s.mdata != nil && s.mseg == k {
		return nil
	}
	s.unmap(false)
	f, err := os.OpenFile(s.segPath(k), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	size := int64(s.segRecs) * SpoolRecordSize
	if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
		f.Close()
		return fmt.Errorf("fallocate %s: %w", f.Name(), err)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return fmt.Errorf("mmap %s: %w", f.Name(), err)
	}
	s.mfile, s.mseg, s.mdata = f, k, data
	return nil
}

// unmap releases the mapped segment; with cut, its file is cut to the
// records it holds (a clean close: no reserved tail left on disk).
func (s *Spool) unmap(cut bool) error {
	if s.mdata == nil {
		return nil
	}
	err := syscall.Munmap(s.mdata)
	if cut {
		if terr := s.mfile.Truncate(int64(s.next-s.mseg*s.segRecs) * SpoolRecordSize); err == nil {
			err = terr
		}
	}
	if cerr := s.mfile.Close(); err == nil {
		err = cerr
	}
	s.mfile, s.mdata = nil, nil
	return err
}

// segments lists the segment numbers on disk, ascending.
func (s *Spool) segments() ([]uint64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("tlogclient: spool: %w", err)
	}
	var out []uint64
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, spoolSegmentPrefix) || !strings.HasSuffix(name, spoolSegmentSuffix) {
			continue
		}
		k, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimPrefix(name, spoolSegmentPrefix), spoolSegmentSuffix), 16, 64)
		if err != nil {
			continue
		}
		out = append(out, k)
	}
	slices.Sort(out)
	return out, nil
}

func (s *Spool) segPath(k uint64) string {
	return filepath.Join(s.dir, fmt.Sprintf("%s%016x%s", spoolSegmentPrefix, k, spoolSegmentSuffix))
}

// recover finds the end of the spool: the last valid record of the last
// segment; anything after it is cut off.
func (s *Spool) recover() error {
	segs, err := s.segments()
	if err != nil {
		return err
	}
	if len(segs) == 0 {
		return nil
	}
	last := segs[len(segs)-1]
	b, err := os.ReadFile(s.segPath(last))
	if err != nil {
		return fmt.Errorf("tlogclient: spool: %w", err)
	}
	n := len(b) / SpoolRecordSize
	for n > 0 && !validRecord(b[(n-1)*SpoolRecordSize:n*SpoolRecordSize]) {
		n--
	}
	if n*SpoolRecordSize != len(b) {
		// A mapped segment left by a killed process ends in its reserved,
		// never-written zeros; anything else after the last valid record
		// is a torn record.
		if tail := b[n*SpoolRecordSize:]; slices.ContainsFunc(tail, func(c byte) bool { return c != 0 }) {
			s.log.Warn("transparency log: spool: cutting off a torn or invalid tail (a write interrupted by a crash; those requests were not answered)",
				"segment", s.segPath(last), "bytes", len(tail))
		}
		if err := os.Truncate(s.segPath(last), int64(n*SpoolRecordSize)); err != nil {
			return fmt.Errorf("tlogclient: spool: %w", err)
		}
	}
	end := last*s.segRecs + uint64(n)
	s.next, s.written = end, end
	s.durable.Store(end)
	s.first.Store(segs[0] * s.segRecs)
	return nil
}

func validRecord(r []byte) bool {
	return string(r[0:4]) == spoolMagic && binary.BigEndian.Uint32(r[60:64]) == crc32.Checksum(r[0:60], castagnoli) &&
		r[4] >= 1 && int(r[4]) < len(artifactCodes)
}

func appendRecord(b []byte, code byte, at time.Time, h [32]byte) []byte {
	var r [SpoolRecordSize]byte
	putRecord(r[:], code, at, h)
	return append(b, r[:]...)
}

// putRecord encodes one record into r (SpoolRecordSize bytes, zero on
// entry or overwritten whole).
func putRecord(r []byte, code byte, at time.Time, h [32]byte) {
	_ = r[SpoolRecordSize-1]
	copy(r[0:4], spoolMagic)
	r[4] = code
	clear(r[5:8])
	binary.BigEndian.PutUint64(r[8:16], uint64(at.UnixNano()))
	copy(r[16:48], h[:])
	clear(r[48:60])
	binary.BigEndian.PutUint32(r[60:64], crc32.Checksum(r[0:60], castagnoli))
}

// spoolEntry is one decoded record.
type spoolEntry struct {
	seq   uint64
	entry Entry
	at    time.Time
}

func decodeRecord(r []byte) (Entry, time.Time, bool) {
	if !validRecord(r) {
		return Entry{}, time.Time{}, false
	}
	var e Entry
	e.ArtifactType = artifactCodes[r[4]]
	copy(e.ArtifactHash[:], r[16:48])
	return e, time.Unix(0, int64(binary.BigEndian.Uint64(r[8:16]))), true
}

// append adds the records of one Record call: mapped, it copies them into
// the segment's mapping and returns; otherwise it adds them to the current
// group and waits until the group is written (and synced, when asked).
func (s *Spool) append(ctx context.Context, code byte, at time.Time, hashes [][32]byte) error {
	s.mu.Lock()
	if s.broken != nil {
		err := s.broken
		s.mu.Unlock()
		return err
	}
	select {
	case <-s.closing:
		s.mu.Unlock()
		return ErrStopped
	default:
	}
	if s.mapped {
		return s.appendMapped(code, at, hashes)
	}
	for _, h := range hashes {
		s.pending = appendRecord(s.pending, code, at, h)
	}
	s.next += uint64(len(hashes))
	g := s.gen
	s.mu.Unlock()
	select {
	case s.kick <- struct{}{}:
	default:
	}
	select {
	case <-g.done:
		return g.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// appendMapped copies records into the mapped segment (moving to the next
// segment when one fills) and publishes them to the senders; it is called
// with mu held and releases it. A failure to map the next segment stops
// the spool as a failed write does: nothing is answered that is not in the
// page cache.
func (s *Spool) appendMapped(code byte, at time.Time, hashes [][32]byte) error {
	var err error
	if len(hashes) >= spoolWriteAtRecords {
		err = s.writeAtMapped(code, at, hashes)
	} else {
		for _, h := range hashes {
			if err = s.mapSegment(s.next / s.segRecs); err != nil {
				break
			}
			off := (s.next - s.mseg*s.segRecs) * SpoolRecordSize
			putRecord(s.mdata[off:off+SpoolRecordSize], code, at, h)
			s.next++
		}
	}
	if err != nil {
		s.broken = fmt.Errorf("tlogclient: spool write failed (restart keysvc once the disk is fixed): %w", err)
	}
	s.durable.Store(s.next)
	broken := s.broken
	s.mu.Unlock()
	// durable is stored before parked is read, and waitWake counts itself
	// in parked before it reads durable (both sequentially consistent):
	// either it sees these records or it is woken.
	if s.parked.Load() > 0 {
		s.wakeAll()
	}
	if err != nil {
		s.log.Error("transparency log: spool write failed; signing with logging on stops until a restart", "dir", s.dir, "err", err)
		return broken
	}
	// No groupHook: a mapped append is not a group commit (nothing is
	// gathered or waited for), and the histogram's shared counters cost
	// more than the copy (docs/performance.md, session 37).
	return nil
}

// spoolWriteAtRecords is the smallest append (a batch's records) that
// writeAtMapped writes with pwrite(2) instead of copying into the mapping.
// A copy into a page of the mapping not yet written faults it in (a
// shared write fault on the file system, ~5-13 µs per 4 KiB page here),
// and each record's cache line is a miss: in serve's profile at 16
// connections of batches of 100 that was 0.4-0.6 µs per record, against
// ~0.04 for the same records in one pwrite(2) (docs/performance.md,
// session 38). One pwrite(2) costs ~1.6 µs, more than a single sign's
// copy, hence the threshold.
const spoolWriteAtRecords = 16

// writeAtMapped appends hashes with one pwrite(2) per segment they
// touch, at the offsets the mapping would have copied them to: the page
// cache is the same (a read through the mapping or the file sees them),
// and so is what survives the process. Called with mu held; on an error
// the records from the failed segment on are not appended (next stays
// before them) and the caller breaks the spool.
func (s *Spool) writeAtMapped(code byte, at time.Time, hashes [][32]byte) error {
	for len(hashes) > 0 {
		if err := s.mapSegment(s.next / s.segRecs); err != nil {
			return err
		}
		i := s.next - s.mseg*s.segRecs
		n := min(uint64(len(hashes)), s.segRecs-i)
		buf := s.scratch[:0]
		for _, h := range hashes[:n] {
			buf = appendRecord(buf, code, at, h)
		}
		s.scratch = buf
		if _, err := s.mfile.WriteAt(buf, int64(i*SpoolRecordSize)); err != nil {
			return err
		}
		s.next += n
		hashes = hashes[n:]
	}
	return nil
}

// writeLoop is the group committer: it writes everything appended while
// the previous write ran, in one write(2) per segment touched.
func (s *Spool) writeLoop() {
	defer close(s.stopped)
	var spare []byte
	for {
		select {
		case <-s.kick:
		case <-s.closing:
			s.mu.Lock()
			g, buf := s.gen, s.pending
			s.pending, s.gen = nil, &spoolGen{done: make(chan struct{})}
			s.mu.Unlock()
			if len(buf) > 0 {
				g.err = s.write(buf)
			}
			close(g.done)
			if s.wfile != nil {
				s.wfile.Close()
			}
			return
		}
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.mu.Unlock()
			continue
		}
		g, buf := s.gen, s.pending
		s.pending, s.gen = spare[:0], &spoolGen{done: make(chan struct{})}
		s.mu.Unlock()
		err := s.write(buf)
		if err != nil {
			s.mu.Lock()
			s.broken = fmt.Errorf("tlogclient: spool write failed (restart keysvc once the disk is fixed): %w", err)
			s.mu.Unlock()
			s.log.Error("transparency log: spool write failed; signing with logging on stops until a restart", "dir", s.dir, "err", err)
		}
		if s.groupHook != nil {
			s.groupHook(len(buf) / SpoolRecordSize)
		}
		g.err = err
		close(g.done)
		spare = buf
	}
}

// write writes buf (whole records, numbered from s.written) to its
// segments; on error the segment is cut back to what was written before.
func (s *Spool) write(buf []byte) error {
	for len(buf) > 0 {
		seg := s.written / s.segRecs
		if s.wfile == nil || s.wseg != seg {
			if s.wfile != nil {
				if s.sync {
					if err := s.wfile.Sync(); err != nil {
						return err
					}
				}
				s.wfile.Close()
				s.wfile = nil
			}
			f, err := os.OpenFile(s.segPath(seg), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
			if err != nil {
				return err
			}
			if s.sync {
				if err := syncPath(s.dir); err != nil {
					f.Close()
					return err
				}
			}
			s.wfile, s.wseg = f, seg
		}
		room := (seg+1)*s.segRecs - s.written
		n := min(uint64(len(buf)/SpoolRecordSize), room)
		chunk := buf[:n*SpoolRecordSize]
		if _, err := s.wfile.Write(chunk); err != nil {
			_ = s.wfile.Truncate(int64((s.written - seg*s.segRecs) * SpoolRecordSize))
			return err
		}
		if s.sync {
			if err := syscall.Fdatasync(int(s.wfile.Fd())); err != nil {
				return err
			}
		}
		s.written += n
		s.durable.Store(s.written)
		buf = buf[len(chunk):]
	}
	s.wakeAll()
	return nil
}

// syncPath fsyncs the file or directory at p.
func syncPath(p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

// subscribe returns a channel that gets a (coalesced) signal after every
// group commit.
func (s *Spool) subscribe() chan struct{} {
	ch := make(chan struct{}, 1)
	s.wakeMu.Lock()
	s.wakes = append(s.wakes, ch)
	s.wakeMu.Unlock()
	return ch
}

// unsubscribe removes a channel subscribe returned (a sender that
// stopped: a Client's Run that returned, or DrainSpool's).
func (s *Spool) unsubscribe(ch chan struct{}) {
	s.wakeMu.Lock()
	defer s.wakeMu.Unlock()
	s.wakes = slices.DeleteFunc(s.wakes, func(c chan struct{}) bool { return c == ch })
}

// waitWake blocks until wake is signalled, ctx ends or tick fires,
// unless the spool already holds records past seen (End() > seen); it
// reports false when ctx ended.
func (s *Spool) waitWake(ctx context.Context, wake chan struct{}, tick <-chan time.Time, seen func() uint64) bool {
	s.parked.Add(1)
	defer s.parked.Add(-1)
	if s.End() > seen() {
		return true
	}
	select {
	case <-ctx.Done():
		return false
	case <-wake:
	case <-tick:
	}
	return true
}

func (s *Spool) wakeAll() {
	s.wakeMu.Lock()
	for _, ch := range s.wakes {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
	s.wakeMu.Unlock()
}

// Err returns the error that stopped the spool (a failed write), or nil.
func (s *Spool) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.broken
}

// End returns the number of records written: the next record's number.
func (s *Spool) End() uint64 { return s.durable.Load() }

// read returns the valid records from seq on, at most limit, never past
// the durable end nor past the end of seq's segment; next is the number
// after the last record looked at. Records of deleted segments are skipped
// (they were delivered); invalid records are skipped and counted.
func (s *Spool) read(seq uint64, limit int) (out []spoolEntry, next uint64, err error) {
	end := s.durable.Load()
	if f := s.first.Load(); seq < f {
		seq = f
	}
	if seq >= end {
		return nil, seq, nil
	}
	seg := seq / s.segRecs
	stop := min(end, (seg+1)*s.segRecs, seq+uint64(limit))
	f, err := os.Open(s.segPath(seg))
	if errors.Is(err, os.ErrNotExist) {
		return nil, min(end, (seg+1)*s.segRecs), nil
	}
	if err != nil {
		return nil, seq, err
	}
	defer f.Close()
	buf := make([]byte, (stop-seq)*SpoolRecordSize)
	n, err := f.ReadAt(buf, int64((seq-seg*s.segRecs)*SpoolRecordSize))
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, seq, err
	}
	buf = buf[:n-n%SpoolRecordSize]
	out = make([]spoolEntry, 0, len(buf)/SpoolRecordSize)
	for i := 0; i+SpoolRecordSize <= len(buf); i += SpoolRecordSize {
		e, at, ok := decodeRecord(buf[i : i+SpoolRecordSize])
		if !ok {
			s.badRecords.Add(1)
			s.log.Error("transparency log: spool: invalid record skipped (its leaf is lost: the receipt fails closed after a revocation)",
				"dir", s.dir, "record", seq+uint64(i/SpoolRecordSize))
			continue
		}
		out = append(out, spoolEntry{seq: seq + uint64(i/SpoolRecordSize), entry: e, at: at})
	}
	return out, seq + uint64(len(buf)/SpoolRecordSize), nil
}

// enqueuedAt returns when record seq was appended (false when it is not
// on disk).
func (s *Spool) enqueuedAt(seq uint64) (time.Time, bool) {
	es, _, err := s.read(seq, 1)
	if err != nil || len(es) == 0 {
		return time.Time{}, false
	}
	return es[0].at, true
}

// cursorPath is the file holding a log's delivered position.
func (s *Spool) cursorPath(logURL string) string {
	h := sha256.Sum256([]byte(logURL))
	return filepath.Join(s.dir, spoolCursorPrefix+hex.EncodeToString(h[:8]))
}

// cursorFile is a cursor file's contents: "URL\nPOS\n", and for a log a
// client ran without, a third line "unlisted-at END" (markUnlisted).
type cursorFile struct {
	url   string
	pos   uint64
	posOK bool // false: the file was cut before the position ended
	// unlistedAt is the spool's end when a client first started without
	// the log: it is owed no leaf appended after that (hasUnlistedAt).
	unlistedAt    uint64
	hasUnlistedAt bool
}

const cursorUnlistedAt = "unlisted-at "

func parseCursorFile(b []byte) cursorFile {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	c := cursorFile{url: lines[0]}
	if len(lines) > 1 {
		n, err := strconv.ParseUint(lines[1], 10, 64)
		c.pos, c.posOK = n, err == nil
	}
	// The mark counts only whole (the file ends with its newline): a number
	// cut by a power loss would read as an earlier end and count less than
	// the log is owed, where every other cut counts more.
	if len(lines) > 2 && strings.HasSuffix(string(b), "\n") {
		if v, ok := strings.CutPrefix(lines[2], cursorUnlistedAt); ok {
			if n, err := strconv.ParseUint(v, 10, 64); err == nil {
				c.unlistedAt, c.hasUnlistedAt = n, true
			}
		}
	}
	return c
}

// loadCursor returns a log's delivered position; ok is false for a log
// the spool has never seen. A cursor file cut by a power loss (empty, or
// cut inside the URL or the position) reads as position 0 with ok true:
// everything still on disk is delivered again (the log folds duplicates),
// where "never seen" would start the log at the spool's end and skip what
// it was owed. An unlisted-at line is ignored: a log configured again is
// delivered everything on disk after its position.
func (s *Spool) loadCursor(logURL string) (uint64, bool) {
	c, ok := s.readCursor(logURL)
	return c.pos, ok
}

// readCursor is loadCursor with the whole file: the position (0 when cut)
// and its unlisted-at mark.
func (s *Spool) readCursor(logURL string) (cursorFile, bool) {
	b, err := os.ReadFile(s.cursorPath(logURL))
	if err != nil {
		return cursorFile{}, false
	}
	c := parseCursorFile(b)
	if strings.Contains(strings.TrimSpace(string(b)), "\n") && c.url != logURL {
		return cursorFile{}, false // another URL with the same file name
	}
	if !c.posOK {
		c.pos = 0
	}
	return c, true
}

// cursorContent is a cursor file's first two lines: the log's URL and its
// delivered position.
func cursorContent(logURL string, pos uint64) string {
	return logURL + "\n" + strconv.FormatUint(pos, 10) + "\n"
}

// saveCursor records a log's delivered position (write to a temporary
// file and rename; not fsynced: a cursor that falls back, or is cut,
// only costs resubmissions). A log's first cursor is written with
// saveCursorDurable: a lost one would read as a log never seen, started at
// the spool's end.
func (s *Spool) saveCursor(logURL string, pos uint64) error {
	return s.writeCursor(logURL, cursorContent(logURL, pos), false)
}

// writeCursor replaces logURL's cursor file with content (a temporary
// file renamed into place); durable: the temporary file is fsynced before
// the rename and the directory after it.
func (s *Spool) writeCursor(logURL, content string, durable bool) error {
	p := s.cursorPath(logURL)
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
		return err
	}
	if durable {
		if err := syncPath(tmp); err != nil {
			return err
		}
	}
	if err := os.Rename(tmp, p); err != nil {
		return err
	}
	if durable {
		return syncPath(s.dir)
	}
	return nil
}

// markUnlisted writes, durably, the spool's end into the cursor file of
// every log it has a cursor for that is not configured and has no such
// mark yet: the leaves appended from now on are not owed to that log, so
// Unlisted counts only the ones it was owed when a client first ran
// without it, and reaches 0 once the configured logs' trimming deleted
// them. A cursor file whose URL was cut is left alone (its log is
// unknown). A client calls it at start, before anything is appended.
func (s *Spool) markUnlisted(configured []string) {
	end := s.End()
	for _, oc := range s.otherCursors(configured) {
		if oc.url == "" || oc.hasUnlistedAt {
			continue
		}
		content := cursorContent(oc.url, oc.pos) + cursorUnlistedAt + strconv.FormatUint(end, 10) + "\n"
		if err := s.writeCursor(oc.url, content, true); err != nil {
			s.log.Warn("transparency log: spool: marking a cursor of a log no longer configured failed; its count includes leaves appended later", "log", oc.url, "err", err)
		}
	}
}

// MoveCursor hands the delivered position the spool keeps for log URL
// from to log URL to, for a log whose URL changed between runs (serve's
// embedded log listens on a new port at each start): the records still
// owed to from are then delivered to to, instead of to no one. When to
// has a position too, the earlier of the two is kept (the log folds
// records delivered twice). moved is false when the spool has no cursor
// for from. Call it before the Client that uses the spool is created.
func (s *Spool) MoveCursor(from, to string) (moved bool, err error) {
	if from == to {
		return false, nil
	}
	pos, ok := s.loadCursor(from)
	if !ok {
		return false, nil
	}
	if have, ok := s.loadCursor(to); ok {
		pos = min(pos, have)
	}
	// Unlike the senders' cursors, the moved one is made durable (file
	// and directory) before the old one goes, and the removal too: the
	// caller forgets from once this returns.
	err = s.saveCursorDurable(to, pos)
	if err == nil {
		err = os.Remove(s.cursorPath(from))
	}
	if err == nil {
		err = syncPath(s.dir)
	}
	if err != nil {
		return false, fmt.Errorf("tlogclient: spool: moving the cursor of %s to %s: %w", from, to, err)
	}
	return true, nil
}

// RewindCursor sets the delivered position of log URL to the first record
// still on disk (or keeps its own, when earlier), durably: everything the
// spool holds is delivered to it again, and the log folds what it has. For
// a log owed records under a position that was lost (a cursor file a
// power loss never wrote). Call it before the Client that uses the spool
// is created.
func (s *Spool) RewindCursor(logURL string) error {
	pos := s.first.Load()
	if have, ok := s.loadCursor(logURL); ok {
		pos = min(pos, have)
	}
	if err := s.saveCursorDurable(logURL, pos); err != nil {
		return fmt.Errorf("tlogclient: spool: rewinding the cursor of %s: %w", logURL, err)
	}
	return nil
}

// saveCursorDurable is saveCursor with the file and its directory fsynced.
func (s *Spool) saveCursorDurable(logURL string, pos uint64) error {
	return s.writeCursor(logURL, cursorContent(logURL, pos), true)
}

// isSpool returns nil when dir holds a spool's LOCK file or a segment,
// else an error wrapping ErrNotASpool (and the directory's read error).
func isSpool(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("%w %s: %w", ErrNotASpool, dir, err)
	}
	for _, e := range ents {
		n := e.Name()
		if n == spoolLockFile || (strings.HasPrefix(n, spoolSegmentPrefix) && strings.HasSuffix(n, spoolSegmentSuffix)) {
			return nil
		}
	}
	return fmt.Errorf("%w %s: no %s file and no segment", ErrNotASpool, dir, spoolLockFile)
}

// otherCursors returns the cursors the spool has for logs not in
// configured, keyed by their log's URL, or by a description of the file
// when the URL is unknown (the file was cut inside it, or could not be
// read; its cursorFile's url is then "").
func (s *Spool) otherCursors(configured []string) map[string]cursorFile {
	ents, _ := os.ReadDir(s.dir)
	mine := make(map[string]bool, len(configured)) // the configured logs' cursor file names
	for _, u := range configured {
		mine[filepath.Base(s.cursorPath(u))] = true
	}
	out := map[string]cursorFile{}
	for _, e := range ents {
		name := e.Name()
		if !strings.HasPrefix(name, spoolCursorPrefix) || strings.HasSuffix(name, ".tmp") || mine[name] {
			continue
		}
		b, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			out["(cursor file "+name+": "+err.Error()+")"] = cursorFile{posOK: true}
			continue
		}
		c := parseCursorFile(b)
		if filepath.Base(s.cursorPath(c.url)) != name {
			// Cut by a power loss inside the URL (cursors are not
			// fsynced): the URL is unknown, the position too.
			out["(cursor file "+name+", its URL cut)"] = cursorFile{}
			continue
		}
		// A cut position reads as 0, as loadCursor does.
		out[c.url] = c
	}
	return out
}

// Unlisted returns, for every log the spool holds a cursor for that is
// not among configured (normalized URLs, NormalizeURL), how many of the
// leaves still on disk it has not been delivered; logs owed nothing are
// left out. Once a client has run without a log (its cursor carries the
// spool's end at that start, markUnlisted), only the leaves before that
// end count: the later ones were never owed to it. A client configured
// with only the listed logs deletes those leaves once the listed logs
// have them (segments are trimmed by the configured logs' cursors alone),
// so `keysvc tlog drain` refuses to run while this is not empty, unless
// told to let them go.
func (s *Spool) Unlisted(configured []string) map[string]uint64 {
	end, first := s.End(), s.first.Load()
	out := map[string]uint64{}
	for u, oc := range s.otherCursors(configured) {
		from := max(oc.pos, first)
		if oc.pos > end {
			from = first // as startSpool reads such a cursor: deliver everything again
		}
		to := end
		if oc.hasUnlistedAt {
			to = min(to, oc.unlistedAt)
		}
		if to > from {
			out[u] = to - from
		}
	}
	return out
}

// trim deletes the segments wholly before pos (every configured log has
// delivered them), never the last one on disk: it is being written, or
// (full) it is what keeps the numbering across a restart — with no segment
// left, records would be numbered from 0 again below the logs' cursors.
func (s *Spool) trim(pos uint64) {
	segs, err := s.segments()
	if err != nil || len(segs) == 0 {
		return
	}
	for _, k := range segs[:len(segs)-1] {
		if (k+1)*s.segRecs > pos || k >= s.durable.Load()/s.segRecs {
			break
		}
		if err := os.Remove(s.segPath(k)); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("transparency log: spool: removing a delivered segment failed", "segment", s.segPath(k), "err", err)
			return
		}
		s.first.Store((k + 1) * s.segRecs)
	}
}

// Close stops the writer (a group in progress is written first) or, mapped,
// unmaps the segment and cuts its file to the records it holds, and
// releases the directory. Call it after the Client's Run returned.
func (s *Spool) Close() error {
	s.mu.Lock()
	select {
	case <-s.closing:
		s.mu.Unlock()
		return nil
	default:
	}
	close(s.closing)
	var err error
	if s.mapped {
		err = s.unmap(true)
	}
	s.mu.Unlock()
	<-s.stopped
	if lerr := s.lock.Close(); err == nil {
		err = lerr
	}
	return err
}

// Dir returns the spool's directory.
func (s *Spool) Dir() string { return s.dir }
