package mcpserve

import (
	"sync"
	"time"

	"github.com/keysvc/keysvc/rotation"
	"github.com/keysvc/keysvc/verifier"
)

// docs reads keysvc's public documents from the current Keyring and keeps
// parsed key histories, so that verifying against a known key costs no
// parse per call.
type docs struct {
	keyring func() *rotation.Keyring
	now     func() time.Time

	mu        sync.Mutex
	histories map[string]*verifier.KeyHistory // by key name + ETag of its history document
	kids      *kidIndex
}

// kidIndex maps every kid of one Keyring snapshot to its key's name (K1:
// a kid is unique across keys).
type kidIndex struct {
	ring *rotation.Keyring
	key  map[string]string
}

// keyOfKID returns the name of the key that has a version kid in ring.
func (d *docs) keyOfKID(ring *rotation.Keyring, kid string) (string, bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.kids == nil || d.kids.ring != ring {
		idx := &kidIndex{ring: ring, key: map[string]string{}}
		for name, e := range ring.Keys {
			for _, v := range e.Versions {
				idx.key[v.KID] = name
			}
		}
		d.kids = idx
	}
	name, ok := d.kids.key[kid]
	return name, ok
}

// history returns the parsed key-history document of a key entry.
func (d *docs) history(e *rotation.KeyEntry) (*verifier.KeyHistory, error) {
	id := e.Key.Name + "\x00" + e.History.ETag
	d.mu.Lock()
	h, ok := d.histories[id]
	d.mu.Unlock()
	if ok {
		return h, nil
	}
	h, err := verifier.ParseKeyHistory(e.History.Body)
	if err != nil {
		return nil, err
	}
	d.mu.Lock()
	if d.histories == nil || len(d.histories) >= 256 {
		d.histories = map[string]*verifier.KeyHistory{} // keys change rarely; start over
	}
	d.histories[id] = h
	d.mu.Unlock()
	return h, nil
}
