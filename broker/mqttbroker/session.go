package mqttbroker

import (
	"context"

	"github.com/eclipse/paho.golang/packets"
	"github.com/eclipse/paho.golang/paho/session"
	"github.com/eclipse/paho.golang/paho/session/state"
)

// ackSession is paho's in-memory session state with one addition: the
// PUBACK of the next PUBLISH added to it goes to a channel the Broker
// chose. paho's blocking Publish waits for one PUBACK at a time, and its
// asynchronous send reports none; with this, one goroutine writes a
// batch's PUBLISH packets in slice order (PublishMethod_AsyncSend, which
// adds each to the session and writes it before returning) and each
// PUBACK still reaches the event it answers. paho calls AddToSession on
// the goroutine that publishes, so next needs no lock of its own beyond
// the link's pubMu, which the sender holds.
type ackSession struct {
	*state.State
	next chan<- packets.ControlPacket
}

func newAckSession() *ackSession { return &ackSession{State: state.NewInMemory()} }

// AddToSession implements session.SessionManager.
func (s *ackSession) AddToSession(ctx context.Context, p session.Packet, resp chan<- packets.ControlPacket) error {
	if p.Type() == packets.PUBLISH && s.next != nil {
		resp, s.next = s.next, nil
	}
	return s.State.AddToSession(ctx, p, resp)
}

var _ session.SessionManager = (*ackSession)(nil)
