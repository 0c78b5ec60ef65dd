package rotation

import (
	"encoding/json"
	"fmt"
	"time"
)

// Duration is a time.Duration written in JSON as a Go duration string
// ("720h", "10m", "1.5s").
type Duration time.Duration

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"720h\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// Policy is a key's rotation policy (VRP K2, K3), stored with the key.
type Policy struct {
	// RotationPeriod is how long a version stays active before the
	// scheduler activates the next one; 0 disables scheduled rotation.
	RotationPeriod Duration `json:"rotation_period,omitempty"`
	// Prepublish is how long the next version is published as pending
	// before it signs. It must exceed the JWKS Cache-Control max-age, so
	// every verifier's cached JWKS holds a version before it signs. The
	// scheduler publishes the next version twice this long before its
	// activation, so a late scheduler still honours it.
	// 0 means the default: twice the max-age (at least one second).
	Prepublish Duration `json:"prepublish,omitempty"`
	// Retention is how long a retired version stays in the plain JWKS
	// after it stopped signing; 0 keeps it forever. Revoked versions never
	// appear there; every version stays in the key-history document.
	Retention Duration `json:"retention,omitempty"`
	// TwoPersonRule makes revocation and key-material destruction need a
	// second principal's approval within the approval window
	// (RequestRevoke or RequestDestroy, then Approve).
	TwoPersonRule bool `json:"two_person_rule,omitempty"`
}

// EffectivePrepublish returns p.Prepublish, or the default for maxAge.
func (p Policy) EffectivePrepublish(maxAge time.Duration) time.Duration {
	if p.Prepublish > 0 {
		return time.Duration(p.Prepublish)
	}
	return max(2*maxAge, time.Second)
}

// Validate checks p against the JWKS max-age verifiers may cache for.
// Errors wrap ErrInvalidRequest and say why.
func (p Policy) Validate(maxAge time.Duration) error {
	if p.RotationPeriod < 0 || p.Prepublish < 0 || p.Retention < 0 {
		return invalid("rotation_period, prepublish and retention must not be negative")
	}
	if p.Prepublish != 0 && time.Duration(p.Prepublish) <= maxAge {
		return invalid("prepublish %s must exceed the JWKS Cache-Control max-age %s: verifiers may cache the JWKS that long, so a new version must be published for longer than that before it signs (VRP K3)",
			time.Duration(p.Prepublish), maxAge)
	}
	if p.RotationPeriod > 0 && time.Duration(p.RotationPeriod) <= p.EffectivePrepublish(maxAge) {
		return invalid("rotation_period %s must exceed prepublish %s", time.Duration(p.RotationPeriod), p.EffectivePrepublish(maxAge))
	}
	return nil
}

func parsePolicy(raw []byte) (Policy, error) {
	var p Policy
	if len(raw) == 0 {
		return p, nil
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		return Policy{}, fmt.Errorf("rotation: stored policy: %w", err)
	}
	return p, nil
}
