package tlog

import "context"

// PendingLen reports how many entries wait for the index follower (tests).
func PendingLen(o *Operator) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return len(o.pending)
}

// CheckpointState runs the state database's WAL checkpoint (tests).
func CheckpointState(o *Operator) error { return o.st.checkpoint(context.Background()) }
