package natsbox

import (
	"strings"
	"time"
)

// Delivery is what the hot path reads of a JetStream delivery's metadata: how many times the
// message was delivered and when the stream stored it.
type Delivery struct {
	NumDelivered uint64
	Timestamp    time.Time
}

// DeliveryOf reads Delivery from reply, a JetStream delivery's reply subject
// ($JS.ACK.STREAM.CONSUMER.DELIVERED.SSEQ.CSEQ.NANOS.PENDING, or with DOMAIN.ACCHASH before
// STREAM and a token after PENDING), as jetstream.Msg.Metadata reads it, and reports false
// where Metadata fails. Metadata allocates its result for every task and every event.
func DeliveryOf(reply string) (Delivery, bool) {
	const v1, v2 = 9, 12 // the tokens of each form (v2's last may be missing)
	n := strings.Count(reply, ".") + 1
	if n < v1 || n > v1 && n < v2-1 || !strings.HasPrefix(reply, "$JS.ACK.") {
		return Delivery{}, false
	}
	skip := 4 // $JS, ACK, STREAM, CONSUMER
	if n > v1 {
		skip = 6 // and DOMAIN, ACCHASH
	}
	rest := reply
	for range skip {
		_, rest, _ = strings.Cut(rest, ".")
	}
	delivered, rest, _ := strings.Cut(rest, ".")
	_, rest, _ = strings.Cut(rest, ".") // SSEQ
	_, rest, _ = strings.Cut(rest, ".") // CSEQ
	nanos, _, _ := strings.Cut(rest, ".")
	return Delivery{NumDelivered: parseNum(delivered), Timestamp: time.Unix(0, int64(parseNum(nanos)))}, true
}

// parseNum reads decimal digits as the library does: anything else, or nothing, is 0.
func parseNum(d string) (n uint64) {
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return 0
		}
		n = n*10 + uint64(d[i]-'0')
	}
	return n
}
