package mqttbroker

import "syscall"

// quickAck sets TCP_QUICKACK, which Linux clears again as it sees fit, so
// it is set after every read.
func quickAck(rc syscall.RawConn) {
	_ = rc.Control(func(fd uintptr) {
		_ = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_QUICKACK, 1)
	})
}
