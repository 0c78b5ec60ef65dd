package api

// SetBatchWorkers replaces how many goroutines sign a batch of n items and
// returns a function that restores the default (benchmarks compare
// sequential with parallel signing).
func SetBatchWorkers(f func(n int) int) (restore func()) {
	batchWorkers = f
	return func() { batchWorkers = defaultBatchWorkers }
}
