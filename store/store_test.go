package store

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/keysvc/keysvc/internal/pgtest"
)

// TestSQLite runs the suite against a fresh SQLite file per subtest.
func TestSQLite(t *testing.T) {
	cfg := func(t *testing.T) Config {
		return Config{SQLitePath: filepath.Join(t.TempDir(), "data", "keysvc.db")}
	}
	t.Run("files", func(t *testing.T) {
		c := cfg(t)
		if _, err := Migrate(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		for path, want := range map[string]os.FileMode{c.SQLitePath: 0o600, filepath.Dir(c.SQLitePath): 0o700} {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if got := fi.Mode().Perm(); got != want {
				t.Errorf("%s: mode %v, want %v", path, got, want)
			}
		}
	})
	t.Run("open missing file", func(t *testing.T) {
		c := cfg(t)
		_, err := Open(context.Background(), c)
		if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "keysvc migrate") {
			t.Fatalf("Open on a missing file: %v, want ErrNotMigrated", err)
		}
		if _, err := os.Stat(c.SQLitePath); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("Open created %s (stat: %v)", c.SQLitePath, err)
		}
	})
	t.Run("open empty file", func(t *testing.T) {
		c := cfg(t)
		if err := os.MkdirAll(filepath.Dir(c.SQLitePath), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(c.SQLitePath, nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(context.Background(), c); !errors.Is(err, ErrNotMigrated) {
			t.Fatalf("Open on an empty file: %v, want ErrNotMigrated", err)
		}
	})
	t.Run("no config", func(t *testing.T) {
		if _, err := Open(context.Background(), Config{}); err == nil {
			t.Fatal("Open(Config{}) succeeded")
		}
	})
	testMigrations(t, cfg, "sqlite")
	runSuite(t, opener(cfg))
}

// TestPostgres runs the suite against a fresh PostgreSQL schema per subtest.
func TestPostgres(t *testing.T) {
	pgtest.URL(t) // skips (or fails when CI=true) if the server is unreachable
	cfg := func(t *testing.T) Config { return Config{PostgresURL: pgtest.URL(t)} }
	t.Run("bad url", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := Open(ctx, Config{PostgresURL: "postgres://nobody:s3cret@127.0.0.1:1/none?sslmode=disable"})
		if err == nil || strings.Contains(err.Error(), "s3cret") {
			t.Fatalf("Open with an unreachable server: %v", err)
		}
	})
	testMigrations(t, cfg, "postgres")
	runSuite(t, opener(cfg))
}

// opener migrates and opens the database cfg returns; closed at cleanup.
func opener(cfg func(t *testing.T) Config) func(t *testing.T) Store {
	return func(t *testing.T) Store {
		t.Helper()
		c := cfg(t)
		if _, err := Migrate(context.Background(), c); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
		s, err := Open(context.Background(), c)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		t.Cleanup(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return s
	}
}

func testMigrations(t *testing.T, cfg func(t *testing.T) Config, kind string) {
	ctx := context.Background()
	t.Run("migrate idempotent", func(t *testing.T) {
		c := cfg(t)
		applied, err := Migrate(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(applied, []int64{1, 2, 3, 5, 6, 7, 8}) {
			t.Fatalf("first Migrate applied %v, want [1 2 3 5 6 7 8]", applied)
		}
		applied, err = Migrate(ctx, c)
		if err != nil || len(applied) != 0 {
			t.Fatalf("second Migrate: applied %v, err %v; want none", applied, err)
		}
		s, err := Open(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if s.Kind() != kind {
			t.Errorf("Kind() = %q, want %q", s.Kind(), kind)
		}
		// Scrub runs outside a transaction (VACUUM cannot run in one).
		if err := s.Scrub(ctx); err != nil {
			t.Errorf("Scrub: %v", err)
		}
	})
	t.Run("migrate 00002 database through 00003", func(t *testing.T) { testMigrate00003(t, cfg, kind) })
	t.Run("open unmigrated", func(t *testing.T) {
		_, err := Open(ctx, cfg(t))
		if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "run `keysvc migrate`") {
			t.Fatalf("Open on an unmigrated database: %v, want ErrNotMigrated", err)
		}
	})
	t.Run("open out of date", func(t *testing.T) {
		c := cfg(t)
		s := opener(func(*testing.T) Config { return c })(t)
		if err := ExecRawForTest(ctx, s, `DELETE FROM goose_db_version WHERE version_id = 1`); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, c)
		if !errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "missing migrations [1]") {
			t.Fatalf("Open with migration 1 missing: %v", err)
		}
	})
	t.Run("open newer schema", func(t *testing.T) {
		c := cfg(t)
		s := opener(func(*testing.T) Config { return c })(t)
		if err := ExecRawForTest(ctx, s, `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99999, true)`); err != nil {
			t.Fatal(err)
		}
		_, err := Open(ctx, c)
		if err == nil || errors.Is(err, ErrNotMigrated) || !strings.Contains(err.Error(), "[99999]") {
			t.Fatalf("Open with an unknown migration: %v", err)
		}
	})
}

// --- fixtures -------------------------------------------------------------

var cet = time.FixedZone("CET", 3600)

// at returns an instant in CET with nanoseconds, to exercise normalization.
func at(day, ns int) time.Time { return time.Date(2025, 3, day, 10, 0, 0, ns, cet) }

// norm is what the store must return for t.
func norm(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

func ptr(t time.Time) *time.Time { return &t }

func normp(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	return ptr(norm(*t))
}

func normKey(k Key) Key { k.CreatedAt = norm(k.CreatedAt); return k }

func normVersion(v KeyVersion) KeyVersion {
	v.CreatedAt = norm(v.CreatedAt)
	for _, p := range []**time.Time{&v.PublishedAt, &v.ActivatesAt, &v.ActivatedAt, &v.RetiredAt, &v.RevokedAt, &v.CompromisedAt, &v.MaterialDestroyedAt} {
		*p = normp(*p)
	}
	return v
}

func normToken(tk APIToken) APIToken {
	tk.CreatedAt = norm(tk.CreatedAt)
	tk.ExpiresAt, tk.RevokedAt, tk.LastUsedAt = normp(tk.ExpiresAt), normp(tk.RevokedAt), normp(tk.LastUsedAt)
	return tk
}

func key(name string) Key {
	return Key{
		Name: name, Issuer: "villaakerlyckan.se", Algorithm: "EdDSA", Backend: "software",
		JWKSURL: "https://villaakerlyckan.se/.well-known/jwks.json", CreatedAt: at(1, 123456789), CreatedBy: "admin",
	}
}

func version(keyName, kid string, state KeyState, created time.Time) KeyVersion {
	return KeyVersion{
		KID: kid, KeyName: keyName, Algorithm: "EdDSA", BackendRef: "software:kid=" + kid,
		PublicJWK: []byte(`{"kty":"OKP","crv":"Ed25519","x":"` + kid + `","kid":"` + kid + `"}`),
		State:     state, CreatedAt: created,
	}
}

func token(id string, created time.Time) APIToken {
	sum := sha256.Sum256([]byte("secret-" + id))
	return APIToken{ID: id, Name: "token " + id, SHA256: sum[:], Scopes: []string{"sign:*", "admin:keys"}, CreatedAt: created}
}

func tx(t *testing.T, s Store, fn func(Tx) error) {
	t.Helper()
	if err := s.InTx(context.Background(), fn); err != nil {
		t.Fatalf("InTx: %v", err)
	}
}

func equal(t *testing.T, what string, got, want any) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("%s:\n got %#v\nwant %#v", what, got, want)
	}
}

func isErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Errorf("%s: err = %v, want %v", what, err, want)
	}
}

// --- the suite --------------------------------------------------------------

// runSuite checks the Store contract; open returns a fresh, migrated, empty
// store that is closed when the test ends.
func runSuite(t *testing.T, open func(t *testing.T) Store) {
	ctx := context.Background()

	t.Run("keys and versions round trip", func(t *testing.T) {
		s := open(t)
		k1 := key("zeta")
		k1.Policy = []byte(`{"rotate_every": "720h",  "overlap":"24h"}`)
		k2 := key("alpha")
		k2.Algorithm, k2.Backend, k2.CreatedAt = "ES256", "pkcs11", at(2, 999)
		full := version("zeta", "villaakerlyckan.se-2025-03-01-01", StateRevoked, at(1, 5000))
		full.SealedPrivateKey = []byte{0x00, 0x01, 0xfe, 0xff, 0x00}
		full.PublishedAt, full.ActivatesAt, full.ActivatedAt = ptr(at(1, 1)), ptr(at(2, 2)), ptr(at(2, 3))
		full.RetiredAt, full.RevokedAt, full.CompromisedAt = ptr(at(5, 4)), ptr(at(6, 5)), ptr(at(4, 6))
		full.RevocationReason = "key compromise"
		full.MaterialDestroyedAt = ptr(at(7, 8))
		// Same CreatedAt: ordered by kid. Earlier CreatedAt sorts first despite its kid.
		b := version("zeta", "villaakerlyckan.se-2025-03-03-02", StateActive, at(3, 0))
		a := version("zeta", "villaakerlyckan.se-2025-03-03-01", StatePending, at(3, 0))
		a.BackendRef = "pkcs11:token=hsm;object=a"
		early := version("zeta", "villaakerlyckan.se-2025-03-09-01", StateRetired, at(1, 0))
		other := version("alpha", "villaakerlyckan.se-2025-03-02-01", StateActive, at(2, 0))

		tx(t, s, func(tx Tx) error {
			for _, k := range []Key{k1, k2} {
				if err := tx.InsertKey(ctx, k); err != nil {
					return err
				}
			}
			for _, v := range []KeyVersion{full, b, a, early, other} {
				if err := tx.InsertVersion(ctx, v); err != nil {
					return err
				}
			}
			// Reads inside the transaction see its writes.
			got, err := tx.GetVersion(ctx, full.KID)
			equal(t, "GetVersion inside tx", got, normVersion(full))
			return err
		})

		got, err := s.GetKey(ctx, "zeta")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "GetKey zeta", got, normKey(k1))
		if got.CreatedAt.Location() != time.UTC {
			t.Errorf("CreatedAt location %v, want UTC", got.CreatedAt.Location())
		}
		keys, err := s.ListKeys(ctx)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListKeys", keys, []Key{normKey(k2), normKey(k1)})
		if keys[0].Policy != nil {
			t.Errorf("nil policy read back as %q", keys[0].Policy)
		}

		v, err := s.GetVersion(ctx, full.KID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "GetVersion full", v, normVersion(full))
		if v.RevokedAt.Location() != time.UTC {
			t.Errorf("RevokedAt location %v, want UTC", v.RevokedAt.Location())
		}
		v, err = s.GetVersion(ctx, a.KID)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "GetVersion a", v, normVersion(a))
		if v.SealedPrivateKey != nil || v.PublishedAt != nil || v.CompromisedAt != nil || v.MaterialDestroyedAt != nil {
			t.Errorf("nil fields read back non-nil: %#v", v)
		}

		vs, err := s.ListVersions(ctx, "zeta")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListVersions zeta", vs, []KeyVersion{normVersion(early), normVersion(full), normVersion(a), normVersion(b)})
		vs, err = s.ListVersions(ctx, "nobody")
		if err != nil || len(vs) != 0 {
			t.Errorf("ListVersions of a missing key: %v, %v; want none", vs, err)
		}
	})

	t.Run("empty store", func(t *testing.T) {
		s := open(t)
		keys, err := s.ListKeys(ctx)
		if err != nil || len(keys) != 0 {
			t.Errorf("ListKeys: %v, %v", keys, err)
		}
		evs, err := s.ListAudit(ctx, 0, 0)
		if err != nil || len(evs) != 0 {
			t.Errorf("ListAudit: %v, %v", evs, err)
		}
		tks, err := s.ListTokens(ctx)
		if err != nil || len(tks) != 0 {
			t.Errorf("ListTokens: %v, %v", tks, err)
		}
	})

	t.Run("not found", func(t *testing.T) {
		s := open(t)
		_, err := s.GetKey(ctx, "nope")
		isErr(t, "GetKey", err, ErrNotFound)
		_, err = s.GetVersion(ctx, "nope-2025-01-01-01")
		isErr(t, "GetVersion", err, ErrNotFound)
		isErr(t, "TouchToken", s.TouchToken(ctx, "nope", at(1, 0)), ErrNotFound)
		for name, fn := range map[string]func(Tx) error{
			"LockKey":         func(tx Tx) error { _, err := tx.LockKey(ctx, "nope"); return err },
			"UpdateKeyPolicy": func(tx Tx) error { return tx.UpdateKeyPolicy(ctx, "nope", []byte(`{}`)) },
			"UpdateVersion": func(tx Tx) error {
				return tx.UpdateVersion(ctx, version("nope", "nope-2025-01-01-01", StateRetired, at(1, 0)))
			},
			"InsertVersion of a missing key": func(tx Tx) error {
				return tx.InsertVersion(ctx, version("nope", "nope-2025-01-01-01", StatePending, at(1, 0)))
			},
			"RevokeToken": func(tx Tx) error { return tx.RevokeToken(ctx, "nope", at(1, 0)) },
		} {
			isErr(t, name, s.InTx(ctx, fn), ErrNotFound)
		}
	})

	t.Run("lock key", func(t *testing.T) {
		s := open(t)
		k := key("k")
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, k) })
		tx(t, s, func(tx Tx) error {
			got, err := tx.LockKey(ctx, "k")
			equal(t, "LockKey", got, normKey(k))
			return err
		})
		// While one transaction holds the lock, another cannot take it.
		locked, release, done := make(chan struct{}), make(chan struct{}), make(chan error)
		go func() {
			done <- s.InTx(ctx, func(tx Tx) error {
				if _, err := tx.LockKey(ctx, "k"); err != nil {
					close(locked)
					return err
				}
				close(locked)
				<-release
				return tx.UpdateKeyPolicy(ctx, "k", []byte(`{"by":"first"}`))
			})
		}()
		<-locked
		short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		err := s.InTx(short, func(tx Tx) error {
			if _, err := tx.LockKey(short, "k"); err != nil {
				return err
			}
			return tx.UpdateKeyPolicy(short, "k", []byte(`{"by":"second"}`))
		})
		cancel()
		if err == nil {
			t.Error("second transaction took the key lock while the first held it")
		}
		close(release)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		got, err := s.GetKey(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "policy", string(got.Policy), `{"by":"first"}`)
	})

	t.Run("update key policy", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) })
		if got, _ := s.GetKey(ctx, "k"); got.SettingsRev != 0 {
			t.Fatalf("settings revision of a new key: %d, want 0", got.SettingsRev)
		}
		for i, p := range [][]byte{[]byte(`{"b": 1,"a":2}`), nil} {
			tx(t, s, func(tx Tx) error { return tx.UpdateKeyPolicy(ctx, "k", p) })
			got, err := s.GetKey(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			equal(t, "policy", got.Policy, p)
			equal(t, "settings revision", got.SettingsRev, int64(i+1))
		}
		tx(t, s, func(tx Tx) error { return tx.UpdateKeyBackend(ctx, "k", "pkcs11") })
		got, _ := s.GetKey(ctx, "k")
		equal(t, "settings revision after a backend change", got.SettingsRev, int64(3))
	})

	t.Run("duplicate key name", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) })
		k := key("k")
		k.Issuer = "other.example"
		err := s.InTx(ctx, func(tx Tx) error { return tx.InsertKey(ctx, k) })
		isErr(t, "second InsertKey", err, ErrConflict)
		got, _ := s.GetKey(ctx, "k")
		equal(t, "issuer", got.Issuer, "villaakerlyckan.se")
	})

	t.Run("duplicate kid across keys", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("a")); err != nil {
				return err
			}
			if err := tx.InsertKey(ctx, key("b")); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, version("a", "x-2025-03-01-01", StatePending, at(1, 0)))
		})
		for _, owner := range []string{"a", "b"} {
			err := s.InTx(ctx, func(tx Tx) error {
				return tx.InsertVersion(ctx, version(owner, "x-2025-03-01-01", StateRetired, at(2, 0)))
			})
			isErr(t, "duplicate kid under "+owner, err, ErrConflict)
		}
		vs, _ := s.ListVersions(ctx, "b")
		if len(vs) != 0 {
			t.Errorf("key b has versions %v", vs)
		}
	})

	t.Run("second active version on insert", func(t *testing.T) {
		s := open(t)
		// One transaction: everything before the conflict is rolled back too.
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("k")); err != nil {
				return err
			}
			if err := tx.InsertVersion(ctx, version("k", "k-1", StateActive, at(1, 0))); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, version("k", "k-2", StateActive, at(2, 0)))
		})
		isErr(t, "second active in one tx", err, ErrConflict)
		_, err = s.GetKey(ctx, "k")
		isErr(t, "key of the failed tx", err, ErrNotFound)
		_, err = s.GetVersion(ctx, "k-1")
		isErr(t, "first version of the failed tx", err, ErrNotFound)

		// Against a committed active version.
		tx(t, s, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("k")); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, version("k", "k-1", StateActive, at(1, 0)))
		})
		err = s.InTx(ctx, func(tx Tx) error {
			if err := tx.InsertVersion(ctx, version("k", "k-0", StatePending, at(1, 0))); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, version("k", "k-2", StateActive, at(2, 0)))
		})
		isErr(t, "second active across txs", err, ErrConflict)
		vs, _ := s.ListVersions(ctx, "k")
		equal(t, "versions", len(vs), 1)
	})

	t.Run("second active version on update", func(t *testing.T) {
		s := open(t)
		v1 := version("k", "k-1", StateActive, at(1, 0))
		v2 := version("k", "k-2", StatePending, at(2, 0))
		tx(t, s, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("k")); err != nil {
				return err
			}
			if err := tx.InsertVersion(ctx, v1); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, v2)
		})
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.UpdateKeyPolicy(ctx, "k", []byte(`{"changed":true}`)); err != nil {
				return err
			}
			act := v2
			act.State, act.ActivatedAt = StateActive, ptr(at(3, 0))
			return tx.UpdateVersion(ctx, act)
		})
		isErr(t, "activate a second version", err, ErrConflict)
		got, _ := s.GetVersion(ctx, "k-2")
		equal(t, "k-2 after failed update", got, normVersion(v2))
		k, _ := s.GetKey(ctx, "k")
		if k.Policy != nil {
			t.Errorf("policy written by the failed tx: %s", k.Policy)
		}

		// Retire then activate in one transaction: fine.
		ret, act := v1, v2
		ret.State, ret.RetiredAt = StateRetired, ptr(at(3, 7))
		act.State, act.ActivatedAt, act.PublishedAt = StateActive, ptr(at(3, 7)), ptr(at(2, 1))
		tx(t, s, func(tx Tx) error {
			if err := tx.UpdateVersion(ctx, ret); err != nil {
				return err
			}
			return tx.UpdateVersion(ctx, act)
		})
		vs, err := s.ListVersions(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "after rotation", vs, []KeyVersion{normVersion(ret), normVersion(act)})

		// UpdateVersion never touches key material or CreatedAt.
		mod := act
		mod.PublicJWK, mod.BackendRef, mod.CreatedAt, mod.SealedPrivateKey = []byte(`{}`), "x", at(9, 0), []byte{1}
		mod.RevocationReason, mod.MaterialDestroyedAt = "superseded", ptr(at(9, 1))
		tx(t, s, func(tx Tx) error { return tx.UpdateVersion(ctx, mod) })
		got, _ = s.GetVersion(ctx, "k-2")
		want := normVersion(act)
		want.RevocationReason = "superseded"
		equal(t, "after UpdateVersion with other fields changed", got, want)
	})

	t.Run("destroy version material", func(t *testing.T) {
		s := open(t)
		sealed := version("k", "k-1", StateRetired, at(1, 0))
		sealed.SealedPrivateKey = []byte{0x01, 0x02, 0x03}
		sealed.ActivatedAt, sealed.RetiredAt = ptr(at(1, 1)), ptr(at(2, 2))
		other := version("k", "k-2", StateActive, at(2, 0))
		other.SealedPrivateKey = []byte{0x09}
		other.ActivatedAt = ptr(at(2, 2))
		tx(t, s, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("k")); err != nil {
				return err
			}
			if err := tx.InsertVersion(ctx, sealed); err != nil {
				return err
			}
			return tx.InsertVersion(ctx, other)
		})

		// Rolled back: nothing changes.
		boom := errors.New("boom")
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.DestroyVersionMaterial(ctx, "k-1", at(3, 0)); err != nil {
				return err
			}
			got, err := tx.GetVersion(ctx, "k-1")
			if err != nil {
				return err
			}
			if got.SealedPrivateKey != nil || !reflect.DeepEqual(got.MaterialDestroyedAt, ptr(norm(at(3, 0)))) {
				t.Errorf("inside the tx: sealed %x destroyed %v", got.SealedPrivateKey, got.MaterialDestroyedAt)
			}
			return boom
		})
		if err != boom {
			t.Fatalf("InTx: %v", err)
		}
		got, _ := s.GetVersion(ctx, "k-1")
		equal(t, "after a rolled-back destruction", got, normVersion(sealed))

		// Committed: the blob is gone, the instant recorded, nothing else changed.
		tx(t, s, func(tx Tx) error { return tx.DestroyVersionMaterial(ctx, "k-1", at(3, 123456789)) })
		want := normVersion(sealed)
		want.SealedPrivateKey, want.MaterialDestroyedAt = nil, ptr(norm(at(3, 123456789)))
		got, err = s.GetVersion(ctx, "k-1")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "after destruction", got, want)
		if got.MaterialDestroyedAt.Location() != time.UTC {
			t.Errorf("MaterialDestroyedAt location %v, want UTC", got.MaterialDestroyedAt.Location())
		}
		vs, err := s.ListVersions(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListVersions after destruction", vs, []KeyVersion{want, normVersion(other)})

		// Again: the first instant stays. UpdateVersion leaves it alone.
		tx(t, s, func(tx Tx) error { return tx.DestroyVersionMaterial(ctx, "k-1", at(4, 0)) })
		upd := want
		upd.State, upd.RevokedAt, upd.CompromisedAt, upd.RevocationReason = StateRevoked, ptr(at(5, 0)), ptr(at(1, 0)), "leak"
		upd.MaterialDestroyedAt, upd.SealedPrivateKey = nil, []byte{7}
		tx(t, s, func(tx Tx) error { return tx.UpdateVersion(ctx, upd) })
		want.State, want.RevokedAt, want.CompromisedAt, want.RevocationReason = StateRevoked, ptr(norm(at(5, 0))), ptr(norm(at(1, 0))), "leak"
		got, _ = s.GetVersion(ctx, "k-1")
		equal(t, "after a second destruction and an update", got, want)

		isErr(t, "missing version", s.InTx(ctx, func(tx Tx) error { return tx.DestroyVersionMaterial(ctx, "nope", at(1, 0)) }), ErrNotFound)
	})

	t.Run("ignored statement error rolls back", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) })
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("new")); err != nil {
				return err
			}
			_ = tx.InsertKey(ctx, key("k")) // conflict, ignored
			return nil
		})
		isErr(t, "InTx", err, ErrConflict)
		_, err = s.GetKey(ctx, "new")
		isErr(t, "key written before the ignored failure", err, ErrNotFound)
	})

	t.Run("invalid writes refused", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) })
		for name, v := range map[string]KeyVersion{
			"bad state": version("k", "k-1", "compromised", at(1, 0)),
			"no jwk":    {KID: "k-1", KeyName: "k", State: StatePending, CreatedAt: at(1, 0)},
		} {
			if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertVersion(ctx, v) }); err == nil {
				t.Errorf("InsertVersion with %s succeeded", name)
			}
		}
	})

	t.Run("active versions of different keys", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error {
			for _, n := range []string{"a", "b"} {
				if err := tx.InsertKey(ctx, key(n)); err != nil {
					return err
				}
				if err := tx.InsertVersion(ctx, version(n, n+"-1", StateActive, at(1, 0))); err != nil {
					return err
				}
			}
			return nil
		})
	})

	t.Run("kids with prefix", func(t *testing.T) {
		s := open(t)
		kids := []string{"b.se-2025-03-01-01", "a.se-2025-03-01-02", "a.se-2025-03-02-01", "a.se-2025-03-01-01"}
		tx(t, s, func(tx Tx) error {
			for _, n := range []string{"a", "b"} {
				if err := tx.InsertKey(ctx, key(n)); err != nil {
					return err
				}
			}
			for _, kid := range kids {
				if err := tx.InsertVersion(ctx, version(kid[:1], kid, StateRetired, at(1, 0))); err != nil {
					return err
				}
			}
			return nil
		})
		for prefix, want := range map[string][]string{
			"a.se-2025-03-01-":   {"a.se-2025-03-01-01", "a.se-2025-03-01-02"},
			"b.se-":              {"b.se-2025-03-01-01"},
			"":                   {"a.se-2025-03-01-01", "a.se-2025-03-01-02", "a.se-2025-03-02-01", "b.se-2025-03-01-01"},
			"a.se-2025-03-01-0_": nil, // no LIKE wildcards
			"a.se-2025-03-%":     nil,
			"A.SE-":              nil, // case-sensitive
			"c":                  nil,
		} {
			tx(t, s, func(tx Tx) error {
				got, err := tx.KIDsWithPrefix(ctx, prefix)
				equal(t, fmt.Sprintf("KIDsWithPrefix(%q)", prefix), got, want)
				return err
			})
		}
	})

	t.Run("rollback on error", func(t *testing.T) {
		s := open(t)
		boom := errors.New("boom")
		err := s.InTx(ctx, func(tx Tx) error {
			if err := tx.InsertKey(ctx, key("k")); err != nil {
				return err
			}
			return boom
		})
		if err != boom {
			t.Errorf("InTx returned %v, want fn's error unchanged", err)
		}
		_, err = s.GetKey(ctx, "k")
		isErr(t, "key after rollback", err, ErrNotFound)
	})

	t.Run("rollback on panic", func(t *testing.T) {
		s := open(t)
		func() {
			defer func() {
				if p := recover(); p != "kaboom" {
					t.Errorf("recovered %v, want the re-panicked value", p)
				}
			}()
			_ = s.InTx(ctx, func(tx Tx) error {
				if err := tx.InsertKey(ctx, key("k")); err != nil {
					return err
				}
				panic("kaboom")
			})
			t.Error("InTx did not re-panic")
		}()
		_, err := s.GetKey(ctx, "k")
		isErr(t, "key after panic", err, ErrNotFound)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) }) // store still usable
	})

	t.Run("tx used after InTx", func(t *testing.T) {
		s := open(t)
		var leaked Tx
		tx(t, s, func(tx Tx) error { leaked = tx; return nil })
		if err := leaked.InsertKey(ctx, key("k")); err == nil {
			t.Error("write through a finished Tx succeeded")
		}
		if _, err := leaked.ListKeys(ctx); err == nil {
			t.Error("read through a finished Tx succeeded")
		}
	})

	t.Run("audit chain", func(t *testing.T) {
		s := open(t)
		in := []AuditEvent{
			{At: at(1, 123456789), Actor: "admin", Action: "key.create", KeyName: "k", Details: []byte(`{"z": 1, "a": [true, null], "s": "å"}`)},
			{Actor: "rotation", Action: "version.publish", KeyName: "k", KID: "k-1"}, // zero At: Now()
			{At: at(2, 0), Actor: "admin", Action: "version.activate", KeyName: "k", KID: "k-1", Reason: "scheduled", Details: []byte{}},
			{At: at(3, 1000), Actor: "admin", Action: "token.create", Details: []byte(`{}`)},
			{At: at(4, 0), Actor: "admin", Action: "version.revoke", KeyName: "k", KID: "k-1", Reason: "compromise", Seq: 77, PrevHash: "bogus", Hash: "bogus"},
		}
		var out []AuditEvent
		before := Now()
		for _, ev := range in {
			tx(t, s, func(tx Tx) error {
				got, err := tx.AppendAudit(ctx, ev)
				out = append(out, got)
				return err
			})
		}
		prev := ""
		for i, ev := range out {
			if ev.Seq != int64(i+1) || ev.PrevHash != prev {
				t.Errorf("row %d: seq %d prev %q, want %d %q", i, ev.Seq, ev.PrevHash, i+1, prev)
			}
			if h, err := AuditHash(ev); err != nil || h != ev.Hash {
				t.Errorf("row %d: hash %q, AuditHash %q (%v)", i, ev.Hash, h, err)
			}
			want := in[i]
			want.Seq, want.PrevHash, want.Hash, want.At = ev.Seq, ev.PrevHash, ev.Hash, norm(want.At)
			if i == 1 {
				if ev.At.Before(before) || ev.At.After(Now()) || ev.At != norm(ev.At) {
					t.Errorf("zero At became %v", ev.At)
				}
				want.At = ev.At
			}
			if len(want.Details) == 0 {
				want.Details = nil
			}
			equal(t, fmt.Sprintf("returned row %d", i), ev, want)
			prev = ev.Hash
		}
		all, err := s.ListAudit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListAudit", all, out)
		if !bytes.Equal(all[0].Details, in[0].Details) {
			t.Errorf("details not stored verbatim: %q", all[0].Details)
		}
		if n, err := VerifyAuditChain(all); n != 0 || err != nil {
			t.Errorf("VerifyAuditChain = %d, %v", n, err)
		}
		page, err := s.ListAudit(ctx, 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListAudit(2, 2)", page, out[2:4])
		page, _ = s.ListAudit(ctx, 4, -1)
		equal(t, "ListAudit(4, -1)", page, out[4:])

		err = s.InTx(ctx, func(tx Tx) error {
			_, err := tx.AppendAudit(ctx, AuditEvent{Actor: "x", Action: "y", Details: []byte(`{not json`)})
			return err
		})
		if err == nil {
			t.Error("AppendAudit with invalid details succeeded")
		}
		all, _ = s.ListAudit(ctx, 0, 0)
		equal(t, "rows after a refused append", len(all), len(out))
	})

	t.Run("audit append-only", func(t *testing.T) {
		s := open(t)
		for i := range 3 {
			tx(t, s, func(tx Tx) error {
				_, err := tx.AppendAudit(ctx, AuditEvent{Actor: "admin", Action: fmt.Sprintf("a.%d", i)})
				return err
			})
		}
		stmts := []string{
			`UPDATE audit_events SET actor = 'mallory' WHERE seq = 2`,
			`UPDATE audit_events SET reason = 'x'`,
			`DELETE FROM audit_events WHERE seq = 3`,
			`DELETE FROM audit_events`,
		}
		if s.Kind() == "postgres" {
			stmts = append(stmts, `TRUNCATE audit_events`)
		}
		for _, q := range stmts {
			isErr(t, q, ExecRawForTest(ctx, s, q), ErrAuditAppendOnly)
		}
		all, err := s.ListAudit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := VerifyAuditChain(all); n != 0 || len(all) != 3 {
			t.Fatalf("chain after refused tampering: %d rows, broken at %d", len(all), n)
		}

		// A superuser can bypass the triggers; the hash chain still tells.
		tamper := `DROP TRIGGER audit_events_no_update; UPDATE audit_events SET actor = 'mallory' WHERE seq = 2`
		if s.Kind() == "postgres" {
			tamper = `ALTER TABLE audit_events DISABLE TRIGGER audit_events_append_only;
				UPDATE audit_events SET actor = 'mallory' WHERE seq = 2;
				ALTER TABLE audit_events ENABLE TRIGGER audit_events_append_only`
		}
		if err := ExecRawForTest(ctx, s, tamper); err != nil {
			t.Fatal(err)
		}
		all, _ = s.ListAudit(ctx, 0, 0)
		if n, err := VerifyAuditChain(all); n != 2 || err != nil {
			t.Errorf("VerifyAuditChain after tampering = %d, %v; want 2", n, err)
		}
	})

	t.Run("concurrent audit appends", func(t *testing.T) {
		s := open(t)
		const workers, each = 8, 5
		var wg sync.WaitGroup
		errs := make(chan error, workers*each)
		for w := range workers {
			wg.Go(func() {
				for i := range each {
					errs <- s.InTx(ctx, func(tx Tx) error {
						_, err := tx.AppendAudit(ctx, AuditEvent{Actor: fmt.Sprintf("w%d", w), Action: fmt.Sprintf("n.%d", i)})
						return err
					})
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
		all, err := s.ListAudit(ctx, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != workers*each {
			t.Fatalf("%d rows, want %d", len(all), workers*each)
		}
		if n, err := VerifyAuditChain(all); n != 0 || err != nil {
			t.Errorf("VerifyAuditChain = %d, %v", n, err)
		}
		seen := map[string]bool{}
		for _, ev := range all {
			seen[ev.Actor+"/"+ev.Action] = true
		}
		if len(seen) != workers*each {
			t.Errorf("%d distinct events, want %d", len(seen), workers*each)
		}
	})

	t.Run("tokens", func(t *testing.T) {
		s := open(t)
		t2 := token("t2", at(1, 0))
		t1 := token("t1", at(1, 0))
		t1.ExpiresAt = ptr(at(20, 5555))
		t0 := token("t0", at(2, 0))
		t0.Scopes = nil
		t3 := token("t3", at(3, 0))
		t3.Scopes = []string{}
		tx(t, s, func(tx Tx) error {
			for _, tk := range []APIToken{t0, t2, t1, t3} {
				if err := tx.InsertToken(ctx, tk); err != nil {
					return err
				}
			}
			return nil
		})
		got, err := s.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "ListTokens", got, []APIToken{normToken(t1), normToken(t2), normToken(t0), normToken(t3)})

		dup := token("t1", at(5, 0))
		isErr(t, "duplicate id", s.InTx(ctx, func(tx Tx) error { return tx.InsertToken(ctx, dup) }), ErrConflict)
		dup = t2
		dup.ID = "t9"
		err = s.InTx(ctx, func(tx Tx) error { return tx.InsertToken(ctx, dup) })
		isErr(t, "duplicate hash", err, ErrConflict)
		if err != nil && (strings.Contains(err.Error(), hex.EncodeToString(t2.SHA256)) || strings.Contains(err.Error(), hex.EncodeToString(t2.SHA256)[:16])) {
			t.Errorf("conflict error reveals the token hash: %v", err)
		}
		short := token("t8", at(5, 0))
		short.SHA256 = short.SHA256[:31]
		if err := s.InTx(ctx, func(tx Tx) error { return tx.InsertToken(ctx, short) }); err == nil {
			t.Error("InsertToken with a 31-byte hash succeeded")
		}

		tx(t, s, func(tx Tx) error { return tx.RevokeToken(ctx, "t2", at(7, 777)) })
		tx(t, s, func(tx Tx) error { return tx.RevokeToken(ctx, "t2", at(8, 0)) }) // keeps the first
		if err := s.TouchToken(ctx, "t1", at(9, 999)); err != nil {
			t.Fatal(err)
		}
		got, err = s.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w1, w2 := normToken(t1), normToken(t2)
		w1.LastUsedAt, w2.RevokedAt = ptr(norm(at(9, 999))), ptr(norm(at(7, 777)))
		equal(t, "after revoke and touch", got, []APIToken{w1, w2, normToken(t0), normToken(t3)})
	})

	t.Run("context cancellation", func(t *testing.T) {
		s := open(t)
		tx(t, s, func(tx Tx) error { return tx.InsertKey(ctx, key("k")) })
		done, cancel := context.WithCancel(ctx)
		cancel()
		_, err := s.GetKey(done, "k")
		isErr(t, "GetKey", err, context.Canceled)
		_, err = s.ListKeys(done)
		isErr(t, "ListKeys", err, context.Canceled)
		isErr(t, "TouchToken", s.TouchToken(done, "x", at(1, 0)), context.Canceled)
		called := false
		err = s.InTx(done, func(Tx) error { called = true; return nil })
		if err == nil || called {
			t.Errorf("InTx with a canceled context: err %v, fn called %v", err, called)
		}

		// Canceled mid-transaction: the statement fails, nothing is committed.
		mid, cancel := context.WithCancel(ctx)
		err = s.InTx(mid, func(tx Tx) error {
			if err := tx.InsertKey(mid, key("m")); err != nil {
				return err
			}
			cancel()
			return tx.InsertKey(mid, key("n"))
		})
		if err == nil {
			t.Error("InTx canceled midway succeeded")
		}
		_, err = s.GetKey(ctx, "m")
		isErr(t, "key of the canceled tx", err, ErrNotFound)
	})
}
