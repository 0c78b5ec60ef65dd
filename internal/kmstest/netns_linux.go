//go:build linux

package kmstest

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// netnsSupported reports whether this process may create and enter network
// namespaces (root on Linux; the kernel decides at the first use).
func netnsSupported() bool { return os.Geteuid() == 0 }

// setNewNetns starts cmd in a new network namespace whose only interface
// is a loopback that starts down.
func setNewNetns(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
}

// inNetns runs fn on an OS thread switched into the network namespace at
// nsPath. Sockets created there stay in that namespace after the thread
// switches back. If switching back fails the thread is left locked, so the
// runtime discards it when the goroutine ends.
func inNetns(nsPath string, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(nsPath)
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer target.Close()
		if err := setns(target.Fd()); err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		ferr := fn()
		if err := setns(self.Fd()); err != nil {
			errc <- errors.Join(ferr, err) // thread stays locked and dies with the goroutine
			return
		}
		runtime.UnlockOSThread()
		errc <- ferr
	}()
	return <-errc
}

func setns(fd uintptr) error {
	return os.NewSyscallError("setns", unix.Setns(int(fd), unix.CLONE_NEWNET))
}

// dialInNetns opens a TCP connection to addr inside the namespace at nsPath.
func dialInNetns(nsPath, addr string) (net.Conn, error) {
	var c net.Conn
	err := inNetns(nsPath, func() (err error) {
		c, err = net.DialTimeout("tcp", addr, 5*time.Second)
		return err
	})
	return c, err
}

// loopbackUp sets IFF_UP on "lo" inside the namespace at nsPath.
func loopbackUp(nsPath string) error {
	return inNetns(nsPath, func() error {
		fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_DGRAM|syscall.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		var ifr struct {
			name  [syscall.IFNAMSIZ]byte
			flags uint16
			_     [22]byte
		}
		copy(ifr.name[:], "lo")
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCGIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return os.NewSyscallError("SIOCGIFFLAGS", e)
		}
		ifr.flags |= syscall.IFF_UP | syscall.IFF_RUNNING
		if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.SIOCSIFFLAGS, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return os.NewSyscallError("SIOCSIFFLAGS", e)
		}
		return nil
	})
}
