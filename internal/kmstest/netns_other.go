//go:build !linux

package kmstest

import (
	"errors"
	"net"
	"os/exec"
)

func netnsSupported() bool { return false }

func setNewNetns(*exec.Cmd) {}

var errNoNetns = errors.New("network namespaces need Linux")

func dialInNetns(string, string) (net.Conn, error) { return nil, errNoNetns }

func loopbackUp(string) error { return errNoNetns }
