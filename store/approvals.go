package store

import (
	"context"
	"database/sql"
	"fmt"
)

const approvalCols = `id, key_name, action, kid, params, requested_by, requested_at, expires_at, status, decided_by, decided_at, requested_by_name, decided_by_name`

func scanApproval(scan func(...any) error) (Approval, error) {
	var a Approval
	var params string
	var decidedBy, decidedByName sql.NullString
	err := scan(&a.ID, &a.KeyName, &a.Action, &a.KID, &params, &a.RequestedBy, timeCol{&a.RequestedAt},
		timeCol{&a.ExpiresAt}, &a.Status, &decidedBy, nullTimeCol{&a.DecidedAt}, &a.RequestedByName, &decidedByName)
	a.Params, a.DecidedBy, a.DecidedByName = []byte(params), decidedBy.String, decidedByName.String
	return a, err
}

// ListApprovals implements Reader.ListApprovals.
func (o ops) ListApprovals(ctx context.Context, status string) ([]Approval, error) {
	q, args := `SELECT `+approvalCols+` FROM approvals`, []any{}
	if status != "" {
		q, args = q+` WHERE status = ?`, append(args, status)
	}
	var out []Approval
	err := o.query(ctx, "list approvals", q+` ORDER BY requested_at DESC, id`, args, func(scan func(...any) error) error {
		a, err := scanApproval(scan)
		out = append(out, a)
		return err
	})
	return out, err
}

// InsertApproval implements Tx.InsertApproval.
func (t *sqlTx) InsertApproval(ctx context.Context, a Approval) error {
	_, err := t.exec(ctx, fmt.Sprintf("insert approval %q", a.ID),
		`INSERT INTO approvals (`+approvalCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?, NULL)`,
		a.ID, a.KeyName, a.Action, a.KID, string(a.Params), a.RequestedBy, t.ts(a.RequestedAt), t.ts(a.ExpiresAt), a.Status, a.RequestedByName)
	return err
}

// LockApproval implements Tx.LockApproval.
func (t *sqlTx) LockApproval(ctx context.Context, id string) (Approval, error) {
	var a Approval
	found := false
	err := t.query(ctx, "lock approval", `SELECT `+approvalCols+` FROM approvals WHERE id = ?`+t.d.forUpdate, []any{id},
		func(scan func(...any) error) (err error) {
			a, err = scanApproval(scan)
			found = true
			return err
		})
	if err != nil {
		return Approval{}, err
	}
	if !found {
		return Approval{}, fmt.Errorf("store: approval %q: %w", id, ErrNotFound)
	}
	return a, nil
}

// DecideApproval implements Tx.DecideApproval.
func (t *sqlTx) DecideApproval(ctx context.Context, a Approval) error {
	n, err := t.exec(ctx, fmt.Sprintf("decide approval %q", a.ID),
		`UPDATE approvals SET status = ?, decided_by = ?, decided_at = ?, decided_by_name = ? WHERE id = ?`,
		a.Status, a.DecidedBy, t.tsp(a.DecidedAt), a.DecidedByName, a.ID)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("store: approval %q: %w", a.ID, ErrNotFound)
	}
	return nil
}
