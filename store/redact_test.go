package store_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/keysvc/keysvc/store"
)

// TestRedactConnString: every spelling of a password pgx accepts in a
// connection string is redacted, the rest is kept as written, and the
// redacted forms name exactly what pgx would read (the password pgx parses
// is the one removed).
func TestRedactConnString(t *testing.T) {
	for _, c := range []struct {
		in, want string
		secret   string // what pgx reads as the password ("" for none)
	}{
		{"", "", ""},
		{"postgres://keysvc:s3cret@db:5432/keysvc?sslmode=verify-full", "postgres://keysvc:REDACTED@db:5432/keysvc?sslmode=verify-full", "s3cret"},
		{"postgresql://keysvc:s3cret@db/keysvc", "postgresql://keysvc:REDACTED@db/keysvc", "s3cret"},
		{"postgres://keysvc@db/keysvc?password=s3cret&sslmode=disable", "postgres://keysvc@db/keysvc?password=REDACTED&sslmode=disable", "s3cret"},
		{"postgres://keysvc@db/keysvc?pass%77ord=s3cret", "postgres://keysvc@db/keysvc?pass%77ord=REDACTED", "s3cret"},
		{"postgres://keysvc@db/keysvc?sslpassword=k3ypass", "postgres://keysvc@db/keysvc?sslpassword=REDACTED", ""},
		// pgx ends userinfo at the first '@' before any '/': the password is "p"
		// and "ss@db" is the host; net/url would say password "p@ss".
		{"postgres://u:p@ss@db/x", "postgres://u:REDACTED@ss@db/x", "p"},
		// a '?' inside the password: net/url would end the authority there.
		{"postgres://u:pw?x&y=z@db/x", "postgres://u:REDACTED@db/x", "pw?x&y=z"},
		{"postgres://u:p%40ss@db/x", "postgres://u:REDACTED@db/x", "p@ss"},
		{"host=db user=keysvc password=s3cret dbname=keysvc", "host=db user=keysvc password=REDACTED dbname=keysvc", "s3cret"},
		{"host=db password = 's3 cr\\'et' dbname=keysvc", "host=db password=REDACTED dbname=keysvc", "s3 cr'et"},
		{"host=db password='' dbname=x", "host=db password=REDACTED dbname=x", ""},
		{"host=db password=a\\ b dbname=x", "host=db password=REDACTED dbname=x", "a b"},
		{"  host=db\tsslpassword='k ey'  ", "host=db sslpassword=REDACTED", ""},
		{"host=db password='unterminated", "REDACTED (keyword/value connection string not shown: an unterminated quoted value)", ""},
		{"host=db s3cretword", `REDACTED (keyword/value connection string not shown: a keyword without "=")`, ""},
		{"postgres://u@db/x?password=%zz", "postgres://u@db/x?password=REDACTED", ""},
		{"postgres://u@db/x?pass%zzword=s3cret", "postgres://REDACTED (connection URL not shown: it does not parse)", ""},
	} {
		got := store.RedactConnString(c.in)
		if got != c.want {
			t.Errorf("RedactConnString(%q) = %q, want %q", c.in, got, c.want)
		}
		if c.secret != "" {
			cfg, err := pgconn.ParseConfig(c.in)
			if err != nil {
				t.Errorf("pgx does not parse %q: %v", c.in, err)
			} else if cfg.Password != c.secret {
				t.Errorf("pgx reads password %q from %q, the test expects %q", cfg.Password, c.in, c.secret)
			}
			if strings.Contains(got, c.secret) && len(c.secret) > 1 {
				t.Errorf("RedactConnString(%q) = %q still holds the password", c.in, got)
			}
		}
	}
}

// TestRedactError: an error message that holds a password of the
// connection string, in any spelling, or the password pgx takes from
// PGPASSWORD, loses it; errors.Is still sees the wrapped error.
func TestRedactError(t *testing.T) {
	base := errors.New("base")
	t.Setenv("PGPASSWORD", "fromTheEnvironment")
	for _, c := range []struct{ conn, msg, secret string }{
		{"host=db password='it\\'s a secret'", "connect: password='it\\'s a secret' refused", "it\\'s a secret"},
		{"host=db password='it\\'s a secret'", "connect: it's a secret", "it's a secret"},
		{"postgres://u:p%40ss@db/x", "dial postgres://u:p%40ss@db/x and p@ss", "p@ss"},
		{"postgres://u@db/x?password=q%26r", "q&r / q%26r", "q&r"},
		{"host=db user=u", "auth failed for fromTheEnvironment", "fromTheEnvironment"},
	} {
		err := store.RedactError(fmt.Errorf("%s: %w", c.msg, base), c.conn)
		if strings.Contains(err.Error(), c.secret) || strings.Contains(err.Error(), strings.ReplaceAll(c.secret, "\\", "")) {
			t.Errorf("RedactError(%q) = %q still holds %q", c.msg, err, c.secret)
		}
		if !strings.Contains(err.Error(), store.Redacted) || !errors.Is(err, base) {
			t.Errorf("RedactError(%q) = %q (errors.Is base: %v)", c.msg, err, errors.Is(err, base))
		}
	}
	err := store.RedactError(errors.New("cannot parse `host=db password='x y`: unterminated"), "host=db password='x y")
	if strings.Contains(err.Error(), "x y") || strings.Contains(err.Error(), "host=db") {
		t.Errorf("unparseable string: %q", err)
	}
	if store.RedactError(nil, "host=db password=x") != nil {
		t.Error("RedactError(nil) is not nil")
	}
}
