//go:build !linux

package main

import "os"

// isTerminal reports whether fd is a character device other than
// /dev/null (a terminal, as far as can be told without termios).
func isTerminal(fd uintptr) bool {
	f := os.NewFile(fd, "")
	fi, err := f.Stat()
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return false
	}
	null, err := os.Stat(os.DevNull)
	return err != nil || !os.SameFile(fi, null)
}
