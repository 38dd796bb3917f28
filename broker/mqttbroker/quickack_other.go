//go:build !linux

package mqttbroker

import "syscall"

// quickAck does nothing where TCP_QUICKACK does not exist.
func quickAck(syscall.RawConn) {}
