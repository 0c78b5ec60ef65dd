package anchor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/keysvc/keysvc/internal/sameorigin"
	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/store"
	"github.com/keysvc/keysvc/tlogclient"
	"github.com/keysvc/keysvc/verifier"
)

// Errors; test with errors.Is.
var (
	// ErrKIDMinted: the log records that the kid was minted before (a
	// deleted row, or key history restored from an older backup).
	ErrKIDMinted = errors.New("anchor: the transparency log records this kid as minted already")
	// ErrLogUnreachable: no configured log answered, so a check that must
	// rest on the log could not be made.
	ErrLogUnreachable = errors.New("anchor: no transparency log answered")
)

// Recorder submits leaves: tlogclient.Client.Record.
type Recorder interface {
	Record(ctx context.Context, artifactType string, artifacts ...string) error
}

// Config configures an Anchor.
type Config struct {
	Key  *EventKey
	Logs []tlogclient.Log // read through proof?hash=
	// LogKeys are the keys the logs' tree heads must verify with (e.g.
	// --tlog-log-keys); nil: each log's own jwks.json, fetched once.
	LogKeys  *verifier.JWKS
	Recorder Recorder    // where events are submitted; nil: check only
	Store    store.Store // the undecorated key-history store
	Logger   *slog.Logger
	// ProbeTimeout bounds one look-up in the logs (default 3 s).
	ProbeTimeout time.Duration
	// CheckBudget bounds what one Check (one reload) spends on look-ups
	// (default 750 ms): a slow log must not hold a reload past the signing
	// lease (ADR 0014). What is not confirmed within it stays unbacked
	// until a later reload.
	CheckBudget time.Duration
	// Scanned, when set, answers every look-up in the logs in place of
	// their proof endpoint: whether a status event's hash is a leaf of a
	// log read in full against a signed tree head (tlogaudit.Scan; keysvc
	// anchor check --scan). A marker's absence is then proved as of that
	// tree instead of resting on a log's unsigned "not found".
	Scanned func(hash [32]byte) bool
	// Now is the clock of owed events (ADR 0052); default time.Now.
	Now func() time.Time
}

// Anchor signs key-history events, submits them and checks key history
// against the log. Safe for concurrent use.
type Anchor struct {
	key    *EventKey
	logs   []tlogclient.Log
	rec    Recorder
	st     store.Store
	as     store.AnchorStore
	log    *slog.Logger
	probe  time.Duration
	budget time.Duration

	mu sync.Mutex
	// known holds hashes known to be backed: signed by this process in a
	// committed change, found in anchor_events, or found in a log. A fact
	// once backed stays backed (the log is append-only).
	known map[[32]byte]bool
	// absent holds markers last probed absent in every log, and when.
	absent   map[[32]byte]absentMarker
	onChange func()
	// downUntil: per log, until when look-ups fail fast after a failure,
	// so that a log outage costs a reload one timeout, not one per marker.
	downUntil map[string]time.Time
	pinned    *verifier.JWKS
	fetched   map[string]*verifier.JWKS // by log URL
	scanned   func([32]byte) bool       // Config.Scanned
	// submitted holds the anchor_events this process has recorded (or
	// found recorded); resubmitStored records the others — rows an offline
	// command (tokens create/revoke) stored when a log did not take them.
	submitted map[[32]byte]bool
	// unbound holds the versions a check found with no backend reference
	// bound yet (ADR 0050); Run binds them.
	unbound map[string]bool
	// owed holds the events this process made (committed changes,
	// bindings) until a log proves it has them; Run records them again
	// meanwhile (settleOwed).
	owed map[[32]byte]*owedEvent
	now  func() time.Time
	// bindPending: Start could not bind (no log answered); Run retries.
	bindPending bool
	// tokenIDs: API tokens whose fact was backed here (ADR 0053).
	tokenIDs map[string]bool
}

// owedEvent is an event made here and not yet found in a log.
type owedEvent struct {
	ev     Event
	since  time.Time // made
	next   time.Time // recorded again at or after
	tries  int
	warned bool
}

// Owed-event timing: recorded again after owedRetryFirst, then at
// doubling intervals up to owedRetryMax; warned about after owedWarnAfter
// (ADR 0052).
const (
	owedRetryFirst = time.Minute
	owedRetryMax   = 30 * time.Minute
	owedWarnAfter  = 15 * time.Minute
	owedProbesMax  = 256 // look-ups per settleOwed pass
)

// owe notes events this process made: they stay owed, in memory, until a
// log proves them (settleOwed). What the log has not taken is otherwise
// owed only from the database — the anchor_events rows and, with
// --tlog-durability outbox, the outbox rows — which the database writer
// this package defends against can delete (ADR 0052).
func (a *Anchor) owe(evs []Event) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		if _, ok := a.owed[ev.Hash]; !ok {
			a.owed[ev.Hash] = &owedEvent{ev: ev, since: now, next: now.Add(owedRetryFirst)}
		}
	}
}

// Owed returns how many events this process made are not yet proved in a
// log, and when the oldest of them was made (zero when none).
func (a *Anchor) Owed() (n int, oldest time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, o := range a.owed {
		if oldest.IsZero() || o.since.Before(oldest) {
			oldest = o.since
		}
	}
	return len(a.owed), oldest
}

// settleOwed looks owed events up in the logs (at most owedProbesMax a
// pass): one a log proves is settled; one every log answered it lacks is
// recorded again once its retry time has come (the outbox or spool row may
// be gone), at doubling intervals. A log that cannot answer leaves them
// owed. An event owed past owedWarnAfter is logged once as an error.
func (a *Anchor) settleOwed(ctx context.Context) {
	a.mu.Lock()
	list := make([]*owedEvent, 0, min(len(a.owed), owedProbesMax))
	for _, o := range a.owed {
		if len(list) == owedProbesMax {
			break
		}
		list = append(list, o)
	}
	a.mu.Unlock()
	var again []Event
	var late []string
	for _, o := range list {
		ok, err := a.logHas(ctx, o.ev)
		if err != nil {
			continue
		}
		now := a.now()
		a.mu.Lock()
		switch {
		case ok:
			delete(a.owed, o.ev.Hash)
		case !now.Before(o.next):
			o.tries++
			wait := owedRetryMax
			if o.tries < 6 {
				wait = min(owedRetryFirst<<o.tries, owedRetryMax)
			}
			o.next = now.Add(wait)
			again = append(again, o.ev)
		}
		if !ok && !o.warned && now.Sub(o.since) >= owedWarnAfter {
			o.warned = true
			late = append(late, o.ev.Kind+" "+o.ev.Subject)
		}
		a.mu.Unlock()
	}
	if len(late) > 0 {
		a.log.Error("key-history events made here are still not in the transparency log; they are recorded again until a log proves them (were the outbox or anchor_events rows deleted?)",
			"events", len(late), "after", owedWarnAfter, "which", strings.Join(late, ", "))
	}
	if len(again) > 0 {
		if err := a.submit(ctx, again); err != nil {
			a.log.Warn("anchor: recording owed key-history events again failed; retrying later", "events", len(again), "err", err)
		}
	}
}

type absentMarker struct {
	at time.Time
	ev Event
}

// New returns an Anchor; Bootstrap and Run it from serve.
func New(cfg Config) (*Anchor, error) {
	if cfg.Key == nil || len(cfg.Logs) == 0 || cfg.Store == nil {
		return nil, errors.New("anchor: an event key, a transparency log and a store are required")
	}
	as, ok := cfg.Store.(store.AnchorStore)
	if !ok {
		return nil, errors.New("anchor: this key-history store cannot keep anchoring events")
	}
	a := &Anchor{key: cfg.Key, logs: cfg.Logs, rec: cfg.Recorder, st: cfg.Store, as: as, log: cfg.Logger, probe: cfg.ProbeTimeout,
		known: map[[32]byte]bool{}, absent: map[[32]byte]absentMarker{}, downUntil: map[string]time.Time{},
		pinned: cfg.LogKeys, fetched: map[string]*verifier.JWKS{}, submitted: map[[32]byte]bool{}, scanned: cfg.Scanned,
		unbound: map[string]bool{}, owed: map[[32]byte]*owedEvent{}, now: time.Now, tokenIDs: map[string]bool{}}
	if a.log == nil {
		a.log = slog.Default()
	}
	if cfg.Now != nil {
		a.now = cfg.Now
	}
	if a.probe <= 0 {
		a.probe = 3 * time.Second
	}
	a.budget = cfg.CheckBudget
	if a.budget <= 0 {
		a.budget = 750 * time.Millisecond
	}
	return a, nil
}

// Key returns the event key.
func (a *Anchor) Key() *EventKey { return a.key }

// OnChange sets what runs when a background re-check changes a verdict
// (the Manager's Reload).
func (a *Anchor) OnChange(fn func()) { a.mu.Lock(); a.onChange = fn; a.mu.Unlock() }

// logKeysClient fetches a log's jwks.json: redirects only within the
// log's origin (sameorigin), bounded in time like a look-up.
var logKeysClient = sameorigin.Client(10 * time.Second)

// logKeys returns the keys that sign l's tree heads: the pinned ones, else
// the log's jwks.json as first fetched (then kept for the process's life).
func (a *Anchor) logKeys(ctx context.Context, l tlogclient.Log) (*verifier.JWKS, error) {
	if a.pinned != nil {
		return a.pinned, nil
	}
	a.mu.Lock()
	k := a.fetched[l.URL()]
	a.mu.Unlock()
	if k != nil {
		return k, nil
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.URL()+tlogclient.PathPrefix+"jwks.json", nil)
	if err != nil {
		return nil, err
	}
	resp, err := logKeysClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("log %s jwks.json: HTTP %d", l.URL(), resp.StatusCode)
	}
	k, err = verifier.ParseJWKS(b)
	if err != nil {
		return nil, fmt.Errorf("log %s jwks.json: %w", l.URL(), err)
	}
	a.mu.Lock()
	a.fetched[l.URL()] = k
	a.mu.Unlock()
	return k, nil
}

// logDownFor is how long look-ups in a log fail fast after one failed.
const logDownFor = 2 * time.Second

// logHas asks every log for the leaf of ev: true when one has it in its
// newest witnessed tree and the answer verifies (verifier.VerifyTlogArtifact: the
// inclusion proof to a tree head signed by the log's key), false when
// every log answered that it has not, ErrLogUnreachable when no log has it
// and one could not answer or answered with a proof that does not verify.
// With Config.Scanned, the scanned trees answer instead (no request).
func (a *Anchor) logHas(ctx context.Context, ev Event) (bool, error) {
	h := ev.Hash
	if a.scanned != nil {
		return a.scanned(h), nil
	}
	var errs []error
	for _, l := range a.logs {
		a.mu.Lock()
		down := time.Now().Before(a.downUntil[l.URL()])
		a.mu.Unlock()
		if down {
			errs = append(errs, fmt.Errorf("log %s failed a look-up less than %s ago", l.URL(), logDownFor))
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, a.probe)
		proof, err := l.Proof(pctx, h, 0)
		if err == nil {
			var keys *verifier.JWKS
			if keys, err = a.logKeys(pctx, l); err == nil {
				if _, verr := verifier.VerifyTlogArtifact(proof, tlogclient.ArtifactStatusEvent, ev.JWS, keys); verr != nil {
					err = fmt.Errorf("log %s: its proof for %s does not verify: %w", l.URL(), tlogclient.FormatHash(h), verr)
				}
			}
		}
		cancel()
		switch {
		case err == nil:
			return true, nil
		case errors.Is(err, tlogclient.ErrNotFound):
		default:
			if ctx.Err() == nil {
				a.mu.Lock()
				a.downUntil[l.URL()] = time.Now().Add(logDownFor)
				a.mu.Unlock()
			}
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return false, fmt.Errorf("%w: %w", ErrLogUnreachable, errors.Join(errs...))
	}
	return false, nil
}

func (a *Anchor) isKnown(h [32]byte) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.known[h]
}

func (a *Anchor) learn(evs ...Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		a.known[ev.Hash] = true
		delete(a.absent, ev.Hash)
	}
}

// factBacked reports whether fact ev was signed in a committed change:
// known here, stored in anchor_events (r), or in a log.
func (a *Anchor) factBacked(ctx context.Context, r store.AnchorStore, ev Event) (bool, error) {
	if a.isKnown(ev.Hash) {
		return true, nil
	}
	if ok, err := stored(ctx, r, ev); err != nil || ok {
		if ok {
			a.learn(ev)
		}
		return ok, err
	}
	ok, err := a.logHas(ctx, ev)
	if ok {
		a.learn(ev)
	}
	return ok, err
}

// markerPresent reports whether marker ev is in a log. A marker probed
// absent before is taken as absent until the refresh loop probes it
// again; one never probed is probed now.
func (a *Anchor) markerPresent(ctx context.Context, ev Event, cachedOK bool) (bool, error) {
	a.mu.Lock()
	if a.known[ev.Hash] {
		a.mu.Unlock()
		return true, nil
	}
	if _, ok := a.absent[ev.Hash]; ok && cachedOK {
		a.mu.Unlock()
		return false, nil
	}
	a.mu.Unlock()
	ok, err := a.logHas(ctx, ev)
	if err != nil {
		return false, err
	}
	a.mu.Lock()
	if ok {
		a.known[ev.Hash] = true
		delete(a.absent, ev.Hash)
	} else {
		a.absent[ev.Hash] = absentMarker{at: time.Now(), ev: ev}
	}
	a.mu.Unlock()
	return ok, nil
}

// markersPresent is markerPresent for many markers, at most 16 look-ups
// in flight: a transition on a key with many versions, on a process that
// has not probed them yet, waits for the slowest look-up, not the sum.
// The first error is returned.
func (a *Anchor) markersPresent(ctx context.Context, evs []Event, cachedOK bool) ([]bool, error) {
	out := make([]bool, len(evs))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(16)
	for i, ev := range evs {
		g.Go(func() error {
			ok, err := a.markerPresent(gctx, ev, cachedOK)
			out[i] = ok
			return err
		})
	}
	return out, g.Wait()
}

// markersPresentEach is markerPresent (cachedOK) for many markers, at
// most 16 look-ups in flight, each with its own answer: one that fails
// does not stop the others.
func (a *Anchor) markersPresentEach(ctx context.Context, evs []Event) ([]bool, []error) {
	out, errs := make([]bool, len(evs)), make([]error, len(evs))
	var g errgroup.Group
	g.SetLimit(16)
	for i, ev := range evs {
		g.Go(func() error {
			out[i], errs[i] = a.markerPresent(ctx, ev, true)
			return nil
		})
	}
	_ = g.Wait() // every func returns nil
	return out, errs
}

// forgetAbsent stops probing markers cached as absent whose answer no
// longer matters (the revocation of an expired token).
func (a *Anchor) forgetAbsent(evs ...Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		delete(a.absent, ev.Hash)
	}
}

// noteAbsent records markers known absent without asking a log (a kid
// minted in a committed change has no later states); Refresh probes them
// again like any marker cached as absent.
func (a *Anchor) noteAbsent(evs ...Event) {
	now := time.Now()
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		if _, ok := a.absent[ev.Hash]; !ok && !a.known[ev.Hash] {
			a.absent[ev.Hash] = absentMarker{at: now, ev: ev}
		}
	}
}

// Check implements rotation.HistoryChecker: for every key and version
// read, whether the log backs it (see the package documentation). Facts
// are looked up in memory, then in anchor_events, then in the logs;
// markers in memory, then in the logs (cached while absent, re-probed by
// Run). A look-up that fails leaves the version unbacked: fail closed.
func (a *Anchor) Check(ctx context.Context, h store.History) rotation.HistoryVerdict {
	ctx, cancel := context.WithTimeout(ctx, a.budget)
	defer cancel()
	v := rotation.HistoryVerdict{Versions: map[string]string{}, Keys: map[string]string{}}
	for _, k := range h.Keys {
		a.checkKey(ctx, k, h.Versions[k.Name], v)
	}
	return v
}

// CheckAll is Check without the per-reload budget (a command line check
// may take as long as its look-ups need).
func (a *Anchor) CheckAll(ctx context.Context, h store.History) rotation.HistoryVerdict {
	v := rotation.HistoryVerdict{Versions: map[string]string{}, Keys: map[string]string{}}
	for _, k := range h.Keys {
		a.checkKey(ctx, k, h.Versions[k.Name], v)
	}
	return v
}

func (a *Anchor) checkKey(ctx context.Context, k store.Key, versions []store.KeyVersion, v rotation.HistoryVerdict) {
	kf, err := a.key.KeyFact(k)
	if err == nil {
		var ok bool
		if ok, err = a.factBacked(ctx, a.as, kf); err == nil && !ok {
			v.Keys[k.Name] = "key " + k.Name + ": its settings (issuer, algorithm, backend, policy) are not backed by the transparency log"
		}
		if err == nil && ok {
			// A backed fact of revision n was written with the markers of
			// revisions 1..n; revision n+1 must be absent, or the row was
			// rolled back to an older, once-anchored value (ADR 0036).
			for r := int64(1); r <= k.SettingsRev; r++ {
				if m, err := a.key.SettingsMarker(k.Name, r); err == nil {
					a.learn(m)
				}
			}
			var next Event
			if next, err = a.key.SettingsMarker(k.Name, k.SettingsRev+1); err == nil {
				var present bool
				if present, err = a.markerPresent(ctx, next, true); err == nil && present {
					v.Keys[k.Name] = fmt.Sprintf("key %s: the transparency log records settings revision %d, but key history holds revision %d: its policy or backend was rolled back in the database (or key history restored from an older backup)", k.Name, k.SettingsRev+1, k.SettingsRev)
				}
			}
		}
	}
	if err != nil {
		v.Keys[k.Name] = "key " + k.Name + ": cannot check against the transparency log: " + err.Error()
	}
	if reason, bad := v.Keys[k.Name]; bad {
		// The key's issuer, jwks_url or algorithm as stored cannot be
		// trusted: nothing of it is published (did:web is per issuer).
		for _, ver := range versions {
			v.Versions[ver.KID] = "version " + ver.KID + ": withheld, " + reason
		}
		return
	}
	allBacked := true
	for _, ver := range versions {
		if reason := a.checkVersion(ctx, ver); reason != "" {
			v.Versions[ver.KID] = reason
			allBacked = false
		}
	}
	n := len(versions)
	if allBacked {
		// n backed versions were each written with their ordinal marker.
		for i := 1; i <= n; i++ {
			if m, err := a.key.OrdinalMarker(k.Name, i); err == nil {
				a.learn(m)
			}
		}
	}
	next, err := a.key.OrdinalMarker(k.Name, n+1)
	if err == nil {
		var present bool
		if present, err = a.markerPresent(ctx, next, true); err == nil && present {
			v.Keys[k.Name] = fmt.Sprintf("key %s: the transparency log records a version number %d, but key history holds %d versions: a version was deleted, or key history was restored from an older backup", k.Name, n+1, n)
		}
	}
	if err != nil && v.Keys[k.Name] == "" {
		v.Keys[k.Name] = "key " + k.Name + ": cannot check against the transparency log: " + err.Error()
	}
}

// checkVersion returns why the log does not back version ver, or "".
func (a *Anchor) checkVersion(ctx context.Context, ver store.KeyVersion) string {
	fact, err := a.key.VersionFact(ver)
	if err != nil {
		return "version " + ver.KID + ": " + err.Error()
	}
	ok, err := a.factBacked(ctx, a.as, fact)
	if err != nil {
		return "version " + ver.KID + ": cannot check against the transparency log: " + err.Error()
	}
	if !ok {
		return "version " + ver.KID + ": its public key, state or instants as stored are not backed by the transparency log (altered or inserted in the database)"
	}
	bound, legacy, err := a.backendBacked(ctx, a.as, ver, true)
	if err != nil {
		return "version " + ver.KID + ": cannot check against the transparency log: " + err.Error()
	}
	if !bound {
		return "version " + ver.KID + ": " + backendNotBacked
	}
	if legacy {
		a.mu.Lock()
		a.unbound[ver.KID] = true
		a.mu.Unlock()
	}
	for _, s := range reachedStates(ver) {
		if m, err := a.key.StateMarker(ver.KID, s); err == nil {
			a.learn(m)
		}
	}
	for _, s := range absentStates(ver) {
		m, err := a.key.StateMarker(ver.KID, s)
		if err != nil {
			return "version " + ver.KID + ": " + err.Error()
		}
		present, err := a.markerPresent(ctx, m, true)
		if err != nil {
			return "version " + ver.KID + ": cannot check against the transparency log: " + err.Error()
		}
		if present {
			what := "state " + s
			if s == "destroyed" {
				what = "its material destroyed"
			}
			return "version " + ver.KID + ": the transparency log records " + what + ", key history says " + string(ver.State) + " (rolled back in the database)"
		}
	}
	return ""
}

// backendNotBacked is why a version whose backend reference was altered
// is withheld.
const backendNotBacked = "its backend reference as stored (where its private key is held) is not the one the transparency log backs (altered in the database)"

// backendBacked reports whether version ver's backend reference as stored
// is the anchored one (ADR 0050): its BackendFact is backed (bound), or
// the version was never bound — minted before references were anchored,
// or by a replica running such a release — and is taken as stored until
// bindBackends binds it (bound and legacy). A version whose BackendMarker
// is in the log but whose fact for the stored reference is not backed was
// altered in the database (not bound). cachedOK as for markerPresent.
func (a *Anchor) backendBacked(ctx context.Context, r store.AnchorStore, ver store.KeyVersion, cachedOK bool) (bound, legacy bool, err error) {
	f, err := a.key.BackendFact(ver)
	if err != nil {
		return false, false, err
	}
	if ok, err := a.factBacked(ctx, r, f); err != nil || ok {
		return ok, false, err
	}
	m, err := a.key.BackendMarker(ver.KID)
	if err != nil {
		return false, false, err
	}
	// The marker is stored with the fact (anchor_events) and recorded
	// with it: stored but not found means the fact row was deleted too.
	present, err := a.storedOrLogged(ctx, r, m, cachedOK)
	if err != nil || present {
		return false, false, err
	}
	return true, true, nil
}

// bindBackends anchors, as stored, the backend reference of every
// version not bound yet (BackendFact and BackendMarker; ADR 0050): those
// minted by a release before references were anchored, or by a replica
// still running one. Trust on first use, as the bootstrap: logged loudly
// with the kids bound. A version whose reference was altered after it was
// bound is left withheld. Start runs it; Run runs it again when a check
// met an unbound version.
func (a *Anchor) bindBackends(ctx context.Context) error {
	if a.rec == nil {
		return nil // check only
	}
	var evs []Event
	var kids []string
	err := a.st.InTx(ctx, func(tx store.Tx) error {
		evs, kids = evs[:0], kids[:0]
		hist, err := tx.ReadHistory(ctx)
		if err != nil {
			return err
		}
		r, _ := tx.(store.AnchorStore)
		if r == nil {
			r = a.as
		}
		for _, k := range hist.Keys {
			for _, v := range hist.Versions[k.Name] {
				_, legacy, err := a.backendBacked(ctx, r, v, false)
				if err != nil {
					return fmt.Errorf("anchor: whether version %s's backend reference is bound: %w", v.KID, err)
				}
				if !legacy {
					continue
				}
				f, err := a.key.BackendFact(v)
				if err != nil {
					return err
				}
				m, err := a.key.BackendMarker(v.KID)
				if err != nil {
					return err
				}
				evs, kids = append(evs, f, m), append(kids, v.KID)
			}
		}
		if len(evs) == 0 {
			return nil
		}
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	})
	if err != nil || len(evs) == 0 {
		return err
	}
	a.mu.Lock()
	for _, kid := range kids {
		delete(a.unbound, kid)
	}
	a.mu.Unlock()
	a.log.Warn("key-history anchoring: the backend references of versions minted before they were anchored are anchored now, as stored, on trust (ADR 0050)",
		"versions", len(kids), "kids", strings.Join(kids, ","))
	a.committed(ctx, evs)
	return nil
}

// Refresh probes every marker cached as absent again and reports whether
// one is now present (then a reload shows the verdict).
func (a *Anchor) Refresh(ctx context.Context) bool {
	a.mu.Lock()
	evs := make([]Event, 0, len(a.absent))
	for _, m := range a.absent {
		evs = append(evs, m.ev)
	}
	a.mu.Unlock()
	changed := false
	for _, ev := range evs {
		if ok, err := a.markerPresent(ctx, ev, false); err == nil && ok {
			a.log.Warn("the transparency log now shows a key-history marker", "kind", ev.Kind, "subject", ev.Subject)
			changed = true
		}
	}
	return changed
}

// Run re-probes absent markers every interval until ctx ends, and calls
// the OnChange function when one appeared; each interval it also records
// stored events this process has not (resubmitStored).
func (a *Anchor) Run(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.resubmitStored(ctx)
		a.settleOwed(ctx)
		a.mu.Lock()
		unbound, pending := len(a.unbound) > 0, a.bindPending
		a.mu.Unlock()
		if pending {
			if err := a.startBindings(ctx); err == nil {
				a.mu.Lock()
				a.bindPending = false
				a.mu.Unlock()
			} else if !errors.Is(err, ErrLogUnreachable) {
				a.log.Warn("anchor: binding backend references and anchoring approvals and API tokens failed; retrying at the next check", "err", err)
			}
		} else if unbound {
			if err := a.bindBackends(ctx); err != nil {
				a.log.Warn("anchor: binding the backend references of versions minted before they were anchored failed; retrying at the next check", "err", err)
			}
		}
		if a.Refresh(ctx) {
			a.mu.Lock()
			fn := a.onChange
			a.mu.Unlock()
			if fn != nil {
				fn()
			}
		}
	}
}

// committed takes the events of a committed change this process made:
// known backed, owed until a log proves them (ADR 0052), and recorded now
// (30 s at most, whatever ctx); what is not recorded now is recorded
// again from anchor_events at the next check or start.
func (a *Anchor) committed(ctx context.Context, evs []Event) {
	a.learn(evs...)
	a.owe(evs)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := a.submit(rctx, evs); err != nil {
		a.log.Error("key-history events committed but not recorded for the transparency log yet; they are submitted again at the next check or start",
			"events", len(evs), "err", err)
		return
	}
	a.markSubmitted(evs)
}

// submit records events' JWS as vrp_status_event leaves.
func (a *Anchor) submit(ctx context.Context, evs []Event) error {
	if len(evs) == 0 {
		return nil
	}
	if a.rec == nil {
		return errors.New("anchor: no recorder configured (check only)")
	}
	jws := make([]string, len(evs))
	for i, ev := range evs {
		jws[i] = ev.JWS
	}
	return a.rec.Record(ctx, tlogclient.ArtifactStatusEvent, jws...)
}

// toStore converts events for anchor_events.
func toStore(evs []Event, at time.Time) []store.AnchorEvent {
	out := make([]store.AnchorEvent, len(evs))
	for i, ev := range evs {
		out[i] = store.AnchorEvent{Hash: ev.Hash, Kind: ev.Kind, Subject: ev.Subject, JWS: ev.JWS, CreatedAt: at}
	}
	return out
}

// Start makes the log know the node's key history: on the first start with
// this event key (no bootstrap marker in the logs or anchor_events) every
// key, version and audit row as it stands now is anchored — trust on first
// use, logged loudly; on every start every stored event is submitted again
// (a change whose events were committed but not yet recorded when the
// process died; the log keeps one entry per hash).
func (a *Anchor) Start(ctx context.Context) error {
	boot, err := a.key.BootstrapMarker()
	if err != nil {
		return err
	}
	stored, err := a.as.ListAnchorEvents(ctx)
	if err != nil {
		return err
	}
	bootstrapped := false
	for _, ev := range stored {
		if ev.Hash == boot.Hash {
			bootstrapped = true
		}
	}
	if !bootstrapped {
		inLog, err := a.logHas(ctx, boot)
		if err != nil {
			return fmt.Errorf("anchor: checking whether key history was anchored before: %w", err)
		}
		bootstrapped = inLog
	}
	if !bootstrapped {
		if err := a.bootstrap(ctx, boot); err != nil {
			return err
		}
		// What bootstrap stored is submitted now, with the rest: until the
		// log has the bootstrap marker, deleting anchor_events would make
		// the next start bootstrap again.
		if stored, err = a.as.ListAnchorEvents(ctx); err != nil {
			return err
		}
	}
	if err := a.submitStored(ctx, stored, false); err != nil {
		return fmt.Errorf("anchor: submitting stored key-history events: %w", err)
	}
	if err := a.startBindings(ctx); err != nil {
		if !errors.Is(err, ErrLogUnreachable) {
			return err
		}
		// A start during a log outage goes on, as it did before these
		// bindings existed; Run binds once a log answers.
		a.log.Warn("anchor: no transparency log answered whether backend references, approvals and API tokens are anchored; retrying at the next check", "err", err)
		a.mu.Lock()
		a.bindPending = true
		a.mu.Unlock()
	}
	return nil
}

// startBindings binds the backend references of versions not bound yet
// (ADR 0050) and starts anchoring approvals (ADR 0051) and API tokens
// (ADR 0053).
func (a *Anchor) startBindings(ctx context.Context) error {
	// Each on its own: one that fails (a version whose look-ups time out)
	// must not keep the others, API tokens above all, unanchored (a
	// review, session 48).
	var errs []error
	if err := a.anchorTokens(ctx); err != nil {
		errs = append(errs, fmt.Errorf("anchor: anchoring API tokens: %w", err))
	}
	if err := a.anchorApprovals(ctx); err != nil {
		errs = append(errs, fmt.Errorf("anchor: anchoring approval requests: %w", err))
	}
	if err := a.bindBackends(ctx); err != nil {
		errs = append(errs, fmt.Errorf("anchor: binding backend references: %w", err))
	}
	return errors.Join(errs...)
}

// LogsHoldHistory returns nil when a configured log proves it holds this
// event key's bootstrap marker: the logs are the ones this key history is
// anchored in, so that a marker they answer "not found" for is absent
// there, not merely in a log that never saw this node (a wrong
// --tlog-url). Errors: ErrLogUnreachable, or one that says the logs do
// not hold it.
func (a *Anchor) LogsHoldHistory(ctx context.Context) error {
	boot, err := a.key.BootstrapMarker()
	if err != nil {
		return err
	}
	ok, err := a.logHas(ctx, boot)
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("anchor: no transparency log given holds this key history (the bootstrap marker of event key %s): give the logs serve anchors key history in", a.key.KID())
	}
	a.learn(boot)
	return nil
}

// approvalsAnchored reports whether approval requests are anchored
// (ApprovalsMarker backed: in memory, anchor_events (r) or a log).
func (a *Anchor) approvalsAnchored(ctx context.Context, r store.AnchorStore) (bool, error) {
	m, err := a.key.ApprovalsMarker()
	if err != nil {
		return false, err
	}
	return a.factBacked(ctx, r, m)
}

// anchorApprovals starts anchoring approval requests (ADR 0051): the
// first start of a release that anchors them signs the facts of the
// approvals pending now, as stored, on trust (logged), and the
// ApprovalsMarker, after which an approval without a backed fact is never
// carried out. Later starts do nothing.
func (a *Anchor) anchorApprovals(ctx context.Context) error {
	_, err := a.anchorOnTrust(ctx, a.key.ApprovalsMarker, "approval requests", "ADR 0051",
		func(tx store.Tx) ([]Event, []string, error) {
			pending, err := tx.ListApprovals(ctx, "pending")
			if err != nil {
				return nil, nil, err
			}
			var evs []Event
			var ids []string
			for _, ap := range pending {
				f, err := a.key.ApprovalFact(ap)
				if err != nil {
					return nil, nil, err
				}
				evs, ids = append(evs, f), append(ids, ap.ID)
			}
			return evs, ids, nil
		})
	return err
}

// anchorOnTrust starts anchoring a kind of row (what, as its ADR says):
// unless the marker (ApprovalsMarker, TokensMarker) is backed — in
// memory, anchor_events or a log — it stores, in one transaction, the
// events collect makes of the rows stored now, taken as stored, on trust,
// and the marker; logs the ids it took; and records them. It returns those
// ids (none when the marker was backed, or without a recorder).
func (a *Anchor) anchorOnTrust(ctx context.Context, marker func() (Event, error), what, adr string,
	collect func(store.Tx) ([]Event, []string, error)) ([]string, error) {
	if a.rec == nil {
		return nil, nil // check only
	}
	m, err := marker()
	if err != nil {
		return nil, err
	}
	if ok, err := a.factBacked(ctx, a.as, m); err != nil || ok {
		return nil, err
	}
	var evs []Event
	var ids []string
	err = a.st.InTx(ctx, func(tx store.Tx) error {
		var err error
		if evs, ids, err = collect(tx); err != nil {
			return err
		}
		evs = append(evs, m)
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	})
	if err != nil {
		return nil, err
	}
	if len(ids) > 0 {
		a.log.Warn("key-history anchoring: "+what+" are anchored from now on; those stored now are anchored as stored, on trust ("+adr+")",
			"rows", len(ids), "ids", strings.Join(ids, ","))
	} else {
		a.log.Info("key-history anchoring: " + what + " are anchored from now on (" + adr + ")")
	}
	a.committed(ctx, evs)
	return ids, nil
}

// storedOrLogged reports whether event ev is in anchor_events (r) or a
// log: a marker this service wrote, whether or not the log has it yet.
// cachedOK as for markerPresent.
func (a *Anchor) storedOrLogged(ctx context.Context, r store.AnchorStore, ev Event, cachedOK bool) (bool, error) {
	if ok, err := stored(ctx, r, ev); err != nil || ok {
		return ok, err
	}
	return a.markerPresent(ctx, ev, cachedOK)
}

// stored reports whether anchor_events (r) holds event ev, its very JWS.
func stored(ctx context.Context, r store.AnchorStore, ev Event) (bool, error) {
	got, err := r.AnchorEventsByHash(ctx, [][32]byte{ev.Hash})
	if err != nil {
		return false, err
	}
	s, ok := got[ev.Hash]
	return ok && s.JWS == ev.JWS, nil
}

// submitStored records stored events, 1,000 per Record, and marks them
// submitted; with onlyNew, only those this process has not recorded.
func (a *Anchor) submitStored(ctx context.Context, stored []store.AnchorEvent, onlyNew bool) error {
	evs := make([]Event, 0, len(stored))
	a.mu.Lock()
	for _, s := range stored {
		if !onlyNew || !a.submitted[s.Hash] {
			evs = append(evs, Event{Kind: s.Kind, Subject: s.Subject, JWS: s.JWS, Hash: s.Hash})
		}
	}
	a.mu.Unlock()
	for len(evs) > 0 {
		n := min(len(evs), 1000)
		if err := a.submit(ctx, evs[:n]); err != nil {
			return err
		}
		a.markSubmitted(evs[:n])
		evs = evs[n:]
	}
	return nil
}

func (a *Anchor) markSubmitted(evs []Event) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, ev := range evs {
		a.submitted[ev.Hash] = true
	}
}

// resubmitStored records the anchor_events this process has not recorded
// — an offline tokens command's whose log did not take them, so they reach
// the log without waiting for a restart. Rows another replica stored (and
// recorded) are recorded once more here, as a start does: the log keeps one
// entry per hash. Each call reads the hashes of anchor_events (32 bytes a
// row), and the rows themselves only for hashes this process has not
// recorded, oldest first.
func (a *Anchor) resubmitStored(ctx context.Context) {
	if a.rec == nil {
		return
	}
	hashes, err := a.as.AnchorEventHashes(ctx)
	if err != nil {
		a.log.Warn("anchor: reading anchor_events to submit new ones failed", "err", err)
		return
	}
	a.mu.Lock()
	var fresh [][32]byte
	for _, h := range hashes {
		if !a.submitted[h] {
			fresh = append(fresh, h)
		}
	}
	a.mu.Unlock()
	if len(fresh) == 0 {
		return
	}
	rows, err := a.as.AnchorEventsByHash(ctx, fresh)
	if err != nil {
		a.log.Warn("anchor: reading anchor_events to submit new ones failed", "err", err)
		return
	}
	stored := make([]store.AnchorEvent, 0, len(rows))
	for _, h := range fresh {
		if ev, ok := rows[h]; ok {
			stored = append(stored, ev)
		}
	}
	// A revocation's markers are owed from memory until a log proves
	// them (ADR 0052, ADR 0053): the process that stored them (tokens
	// revoke, an awskms command) may have exited before a log took them,
	// and their rows can be deleted. Only markers the event key signed,
	// under their own hash, and only these kinds: a database writer must
	// not fill this process's memory, nor make it unready, with rows of
	// its own or a peer's burst of ordinary events (a review, session 48).
	var adopt []Event
	for _, s := range stored {
		ev := Event{Kind: s.Kind, Subject: s.Subject, JWS: s.JWS, Hash: s.Hash}
		if (ev.Kind == MarkerTokenRevoked || ev.Kind == MarkerState) && a.key.signed(ev) {
			adopt = append(adopt, ev)
		}
	}
	a.owe(adopt)
	if err := a.submitStored(ctx, stored, true); err != nil {
		a.log.Warn("anchor: submitting stored key-history events failed; retrying at the next check", "err", err)
	}
}

// bootstrap anchors key history as it stands: the first start with an
// event key.
func (a *Anchor) bootstrap(ctx context.Context, boot Event) error {
	var evs []Event
	var nk, nv, na int
	err := a.st.InTx(ctx, func(tx store.Tx) error {
		evs = evs[:0]
		hist, err := tx.ReadHistory(ctx)
		if err != nil {
			return err
		}
		rows, err := tx.ListAudit(ctx, 0, 0)
		if err != nil {
			return err
		}
		for _, k := range hist.Keys {
			e, err := a.key.KeyFact(k)
			if err != nil {
				return err
			}
			evs = append(evs, e)
			// Every settings change appends an audit row, so a revision
			// past their number was written by hand (and would have this
			// loop sign without end).
			if k.SettingsRev > int64(len(rows)) {
				return fmt.Errorf("anchor: key %s is at settings revision %d, more than the %d audit rows: refusing to anchor it", k.Name, k.SettingsRev, len(rows))
			}
			for r := int64(1); r <= k.SettingsRev; r++ {
				m, err := a.key.SettingsMarker(k.Name, r)
				if err != nil {
					return err
				}
				evs = append(evs, m)
			}
			for i, v := range hist.Versions[k.Name] {
				more, err := a.versionEvents(v, i+1, true)
				if err != nil {
					return err
				}
				evs = append(evs, more...)
			}
			nk, nv = nk+1, nv+len(hist.Versions[k.Name])
		}
		if broken, err := store.VerifyAuditChain(rows); err != nil || broken != 0 {
			return fmt.Errorf("anchor: the audit chain is broken at row %d (%v): refusing to anchor it", broken, err)
		}
		for _, r := range rows {
			more, err := a.auditEvents(r)
			if err != nil {
				return err
			}
			evs = append(evs, more...)
		}
		na = len(rows)
		evs = append(evs, boot)
		return tx.(store.AnchorWriter).InsertAnchorEvents(ctx, toStore(evs, store.Now()))
	})
	if err != nil {
		return err
	}
	a.learn(evs...)
	a.log.Warn("key-history anchoring starts: key history as it stands now is anchored in the transparency log on trust (first start with this event key)",
		"keys", nk, "versions", nv, "audit_rows", na, "event_key", a.key.KID())
	return nil
}

// versionEvents are the fact of v as stored and its markers: the kid and
// the ordinal n when minted, the states reached.
func (a *Anchor) versionEvents(v store.KeyVersion, n int, minted bool) ([]Event, error) {
	f, err := a.key.VersionFact(v)
	if err != nil {
		return nil, err
	}
	bf, err := a.key.BackendFact(v)
	if err != nil {
		return nil, err
	}
	bm, err := a.key.BackendMarker(v.KID)
	if err != nil {
		return nil, err
	}
	out := []Event{f, bf, bm}
	if minted {
		m, err := a.key.KIDMarker(v.KID)
		if err != nil {
			return nil, err
		}
		o, err := a.key.OrdinalMarker(v.KeyName, n)
		if err != nil {
			return nil, err
		}
		out = append(out, m, o)
	}
	for _, s := range reachedStates(v) {
		m, err := a.key.StateMarker(v.KID, s)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

func (a *Anchor) auditEvents(r store.AuditEvent) ([]Event, error) {
	f, err := a.key.AuditFact(r)
	if err != nil {
		return nil, err
	}
	m, err := a.key.AuditSeqMarker(r.Seq)
	if err != nil {
		return nil, err
	}
	return []Event{f, m}, nil
}

// AuditResult is what VerifyAudit found.
type AuditResult struct {
	Anchored   int    // rows whose anchored head matches
	Unanchored int    // rows the log has no marker for (written without the event key)
	FirstSeq   int64  // the first divergent row (0: none)
	Divergence string // what diverges ("" when nothing)
}

// VerifyAudit checks an intact audit chain (store.VerifyAuditChain found no
// broken row) against the heads anchored in the logs: a row whose seq
// marker the log has must have its anchored hash (a rewrite with
// recomputed hashes changes it), and the log must have no marker for the
// row after the last (truncation). A row's head is looked up in
// anchor_events and in the logs; its marker in the logs only.
func (a *Anchor) VerifyAudit(ctx context.Context, rows []store.AuditEvent) (AuditResult, error) {
	var res AuditResult
	for _, r := range rows {
		f, err := a.key.AuditFact(r)
		if err != nil {
			return res, err
		}
		ok, err := a.factBacked(ctx, a.as, f)
		if err != nil {
			return res, err
		}
		if ok {
			res.Anchored++
			continue
		}
		present, err := a.auditSeqInLog(ctx, r.Seq)
		if err != nil {
			return res, err
		}
		if present {
			res.FirstSeq = r.Seq
			res.Divergence = fmt.Sprintf("the log anchors row %d with another hash than %s (the row, or one before it, was rewritten and the chain recomputed)", r.Seq, r.Hash)
			return res, nil
		}
		res.Unanchored++
	}
	next := int64(len(rows)) + 1
	present, err := a.auditSeqInLog(ctx, next)
	if err != nil {
		return res, err
	}
	if present {
		res.FirstSeq = next
		res.Divergence = fmt.Sprintf("the log anchors a row %d but the chain ends at row %d (truncated)", next, len(rows))
	}
	return res, nil
}

// auditSeqInLog reports whether a log holds the marker that audit row seq
// exists (probed now, not taken from the absent cache).
func (a *Anchor) auditSeqInLog(ctx context.Context, seq int64) (bool, error) {
	m, err := a.key.AuditSeqMarker(seq)
	if err != nil {
		return false, err
	}
	return a.markerPresent(ctx, m, false)
}
