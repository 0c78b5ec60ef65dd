package main

import "golang.org/x/sys/unix"

// isTerminal reports whether fd is a terminal (TCGETS succeeds; /dev/null,
// a character device too, is not one).
func isTerminal(fd uintptr) bool {
	_, err := unix.IoctlGetTermios(int(fd), unix.TCGETS)
	return err == nil
}
