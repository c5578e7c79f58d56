package natsbox

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
)

// ResetConsumer asks the leader of consumer's durable consumer of stream to deliver again
// everything past its acknowledged floor (CONSUMER.RESET, nats-server 2.14 and later), and
// returns the sequence it delivers from. A delivery lost on its way (its NATS node stopped
// or died with it in a buffer, the leader that sent it stepped down) comes again at once,
// rather than after the consumer's AckWait; what was delivered and not acknowledged yet comes
// twice. An older server answers nothing (an error, after ctx).
//
// With seq above 0 the consumer delivers from seq instead, and its acknowledged floor becomes
// seq-1: what lies below seq is taken as acknowledged (a consumer that delivers everything,
// jetstream.DeliverAllPolicy, may be moved anywhere; one made from a start sequence, not
// below it).
func ResetConsumer(ctx context.Context, js jetstream.JetStream, stream, consumer string, seq uint64) (uint64, error) {
	var reply struct {
		ResetSeq uint64              `json:"reset_seq"`
		Error    *jetstream.APIError `json:"error"`
	}
	req := []byte("{}")
	if seq > 0 {
		req = fmt.Appendf(nil, `{"seq":%d}`, seq)
	}
	msg, err := js.Conn().RequestWithContext(ctx, APIOf(js).Subject("CONSUMER.RESET."+stream+"."+consumer), req)
	if err != nil {
		return 0, fmt.Errorf("natsbox: reset consumer %s of %s: %w", consumer, stream, err)
	}
	if err := json.Unmarshal(msg.Data, &reply); err != nil {
		return 0, fmt.Errorf("natsbox: reset consumer %s of %s: the answer %.60q: %w", consumer, stream, msg.Data, err)
	}
	if reply.Error != nil {
		return 0, fmt.Errorf("natsbox: reset consumer %s of %s: %w", consumer, stream, reply.Error)
	}
	return reply.ResetSeq, nil
}
