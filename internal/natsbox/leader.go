package natsbox

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// A KV watch is an R1 consumer that the cluster may place on any replica of the bucket's
// stream, including one that has not caught up yet (a node back from a crash): a listing read
// there misses what its leader holds. MissingFromLeader asks the leader, which answers stream
// information and message gets that are not direct, what a listing should have seen.

// MissingFromLeader returns, by key, the values of the keys of bucket matching filter (a key
// filter, "A.>") that the stream's leader holds as values, not as deletes or purges, and that
// the listing did not see (seen reports false), read from the leader: none when the listing
// read everything.
func MissingFromLeader(ctx context.Context, js jetstream.JetStream, bucket, filter string, seen func(key string) bool) (map[string][]byte, error) {
	stream := "KV_" + bucket
	prefix := "$KV." + bucket + "."
	var info *jetstream.StreamInfo
	err := Retry(ctx, func(ctx context.Context) error {
		s, err := js.Stream(ctx, stream)
		if err != nil {
			return err
		}
		info, err = s.Info(ctx, jetstream.WithSubjectFilter(prefix+filter))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("natsbox: stream %s: %w", stream, err)
	}
	var missing map[string][]byte
	for subject := range info.State.Subjects {
		key := strings.TrimPrefix(subject, prefix)
		if seen(key) {
			continue
		}
		last, err := leaderLast(ctx, js.Conn(), APIOf(js), stream, subject)
		if err != nil {
			return nil, err
		}
		if last.live {
			if missing == nil {
				missing = map[string][]byte{}
			}
			missing[key] = last.value
		}
	}
	return missing, nil
}

// LeaderRevision returns the revision of key in bucket as the stream's leader answers: not a
// direct get, which a replica that has not caught up may answer with an older one. found is
// false when the key has no value (never written, deleted or purged).
func LeaderRevision(ctx context.Context, js jetstream.JetStream, bucket, key string) (rev uint64, found bool, err error) {
	last, err := leaderLast(ctx, js.Conn(), APIOf(js), "KV_"+bucket, "$KV."+bucket+"."+key)
	if err != nil {
		return 0, false, err
	}
	return last.seq, last.live, nil
}

// lastMsg is the last message of a subject: its value, sequence, and whether it is a value
// rather than a delete or purge marker (live). The zero lastMsg: there is none.
type lastMsg struct {
	value []byte
	seq   uint64
	live  bool
}

// leaderLast returns the last message of subject in stream as its leader answers
// (STREAM.MSG.GET, never a direct get, which any replica may answer). The request goes to api,
// the JetStream of the caller's context, and is sent again until ctx ends.
func leaderLast(ctx context.Context, nc *nats.Conn, api API, stream, subject string) (lastMsg, error) {
	req, err := json.Marshal(map[string]string{"last_by_subj": subject})
	if err != nil {
		return lastMsg{}, err
	}
	var resp *nats.Msg
	err = Retry(ctx, func(ctx context.Context) error {
		resp, err = nc.RequestWithContext(ctx, api.Subject("STREAM.MSG.GET."+stream), req)
		return err
	})
	if err != nil {
		return lastMsg{}, fmt.Errorf("natsbox: read the last message of %s from the leader of %s: %w", subject, stream, err)
	}
	var reply struct {
		Message *struct {
			Header []byte `json:"hdrs"`
			Data   []byte `json:"data"`
			Seq    uint64 `json:"seq"`
		} `json:"message"`
		Error *jetstream.APIError `json:"error"`
	}
	if err := json.Unmarshal(resp.Data, &reply); err != nil {
		return lastMsg{}, fmt.Errorf("natsbox: the leader of %s answered a message get with %.60q: %w", stream, resp.Data, err)
	}
	switch {
	case reply.Error != nil && reply.Error.Code == 404: // none, or gone since the stream information
		return lastMsg{}, nil
	case reply.Error != nil:
		return lastMsg{}, fmt.Errorf("natsbox: read the last message of %s from the leader of %s: %w", subject, stream, reply.Error)
	case reply.Message == nil:
		return lastMsg{}, fmt.Errorf("natsbox: the leader of %s answered a message get without a message", stream)
	}
	return lastMsg{value: reply.Message.Data, seq: reply.Message.Seq, live: kvOperation(reply.Message.Header) == ""}, nil
}

// kvOperation is the KV-Operation header of a message's headers ("NATS/1.0\r\nKEY: VALUE..."):
// "DEL" or "PURGE" for the markers of a delete or purge, "" for a value.
func kvOperation(hdrs []byte) string {
	for _, line := range strings.Split(string(hdrs), "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(strings.TrimSpace(k), "KV-Operation") {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
