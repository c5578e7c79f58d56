package natsbox

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

func TestParsePubAck(t *testing.T) {
	tests := []struct {
		name string
		data string
		want *jetstream.PubAck
		code jetstream.ErrorCode // an API error with this code, when want is nil
	}{
		{"template", `{"stream":"REINS_TASKS","seq":42}`, &jetstream.PubAck{Stream: "REINS_TASKS", Sequence: 42}, 0},
		{"duplicate as the server writes it", `{"stream":"REINS_TASKS","seq":7,"duplicate": true}`,
			&jetstream.PubAck{Stream: "REINS_TASKS", Sequence: 7, Duplicate: true}, 0},
		{"duplicate without the space", `{"stream":"S","seq":7,"duplicate":true}`, &jetstream.PubAck{Stream: "S", Sequence: 7, Duplicate: true}, 0},
		{"domain", `{"stream":"KV_reins_runs","domain":"hub","seq":18446744073709551615}`,
			&jetstream.PubAck{Stream: "KV_reins_runs", Domain: "hub", Sequence: 18446744073709551615}, 0},
		{"spaces: read by encoding/json", `{ "stream": "S", "seq": 3 }`, &jetstream.PubAck{Stream: "S", Sequence: 3}, 0},
		{"batch: read by encoding/json", `{"stream":"S","seq":9,"batch":"b1","count":2}`, &jetstream.PubAck{Stream: "S", Sequence: 9}, 0},
		{"counter: read by encoding/json", `{"stream":"S","seq":9,"val":"12"}`, &jetstream.PubAck{Stream: "S", Sequence: 9, Value: "12"}, 0},
		{"escaped name: read by encoding/json", `{"stream":"A\u0042","seq":1}`, &jetstream.PubAck{Stream: "AB", Sequence: 1}, 0},
		{"wrong last sequence", `{"error":{"code":400,"err_code":10071,"description":"wrong last sequence: 5"},"stream":"KV_reins_runs","seq":0}`,
			nil, jetstream.JSErrCodeStreamWrongLastSequence},
		{"no stream", `{"seq":1}`, nil, 0},
		{"empty stream", `{"stream":"","seq":1}`, nil, 0},
		{"not JSON", `+OK`, nil, 0},
		{"sequence too large", `{"stream":"S","seq":18446744073709551616}`, nil, 0},
		{"truncated", `{"stream":"S","seq":1`, nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParsePubAck([]byte(tc.data))
			if tc.want != nil {
				if err != nil || !reflect.DeepEqual(got, tc.want) {
					t.Fatalf("ParsePubAck(%s) = %+v, %v; want %+v", tc.data, got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParsePubAck(%s) = %+v, want an error", tc.data, got)
			}
			var api *jetstream.APIError
			switch {
			case tc.code != 0 && (!errors.As(err, &api) || api.ErrorCode != tc.code):
				t.Errorf("ParsePubAck(%s) = %v, want the API error %d", tc.data, err, tc.code)
			case tc.code == 0 && !errors.Is(err, jetstream.ErrInvalidJSAck):
				t.Errorf("ParsePubAck(%s) = %v, want ErrInvalidJSAck", tc.data, err)
			}
		})
	}
}

// decodePubAck is the reference ParsePubAck must agree with: the whole reply through
// encoding/json, as nats.go reads it.
func decodePubAck(data []byte) (*jetstream.PubAck, bool) {
	var resp struct {
		Error *jetstream.APIError `json:"error"`
		jetstream.PubAck
	}
	if json.Unmarshal(data, &resp) != nil || resp.Error != nil || resp.Stream == "" {
		return nil, false
	}
	return &resp.PubAck, true
}

func FuzzParsePubAck(f *testing.F) {
	for _, s := range []string{
		`{"stream":"REINS_TASKS","seq":42}`, `{"stream":"S","seq":7,"duplicate": true}`,
		`{"stream":"S","domain":"d","seq":1}`, `{"stream":"S","seq":01}`, `{"stream":"S\"","seq":1}`,
		`{"error":{"code":503,"description":"unavailable"}}`, `{"stream":"S","seq":1}x`, `{"stream":"é","seq":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := ParsePubAck(data)
		want, ok := decodePubAck(data)
		if ok != (err == nil) || ok && !reflect.DeepEqual(got, want) {
			t.Fatalf("ParsePubAck(%q) = %+v, %v; encoding/json reads %+v (ok %v)", data, got, err, want, ok)
		}
	})
}

// TestTemplateAckAllocs: the acknowledgement of a publish of the hot path is read into a value,
// without an allocation (its stream's name is interned).
func TestTemplateAckAllocs(t *testing.T) {
	data := []byte(`{"stream":"REINS_EVENTS","seq":1234567}`)
	if ack, ok := parseTemplateAck(data); !ok || ack.Stream != "REINS_EVENTS" || ack.Sequence != 1234567 {
		t.Fatalf("parseTemplateAck = %+v, %v", ack, ok)
	}
	if n := testing.AllocsPerRun(100, func() { _, _ = parseTemplateAck(data) }); n != 0 {
		t.Errorf("parseTemplateAck allocates %v times, want 0", n)
	}
}

func TestCheckKey(t *testing.T) {
	for _, key := range []string{"run-1", "a/b/c", "x=1.2", "A_Z-09"} {
		if err := CheckKey(key); err != nil {
			t.Errorf("CheckKey(%q) = %v, want nil", key, err)
		}
	}
	for _, key := range []string{"", ".a", "a.", "a b", "a*", "a>", "ü"} {
		if err := CheckKey(key); !errors.Is(err, jetstream.ErrInvalidKey) {
			t.Errorf("CheckKey(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
}

func TestPublish(t *testing.T) {
	b := open(t, Options{DataDir: t.TempDir()})
	ensure(t, b.JetStream())
	ctx := testCtx(t)
	m := func() *nats.Msg {
		return &nats.Msg{Subject: taskSubject(t, "pub"), Data: []byte(`{}`),
			Header: nats.Header{jetstream.MsgIDHeader: []string{"pub-1"}}}
	}
	first, err := Publish(ctx, b.Conn(), m())
	if err != nil || first.Stream != TasksStream || first.Duplicate {
		t.Fatalf("Publish = %+v, %v; want a new message in %s", first, err, TasksStream)
	}
	again, err := Publish(ctx, b.Conn(), m())
	if err != nil || !again.Duplicate || again.Sequence != first.Sequence {
		t.Fatalf("Publish of the same message id = %+v, %v; want the duplicate of sequence %d", again, err, first.Sequence)
	}
	_, err = Publish(ctx, b.Conn(), &nats.Msg{Subject: "no.stream.here", Data: []byte(`{}`)})
	if !errors.Is(err, jetstream.ErrNoStreamResponse) {
		t.Errorf("Publish outside every stream = %v, want ErrNoStreamResponse", err)
	}
}

func TestUpdateKV(t *testing.T) {
	b, kv := runsBucket(t)
	ctx := testCtx(t)
	rev1, err := kv.Create(ctx, "run/1", []byte(`{"iteration":0}`))
	if err != nil {
		t.Fatal(err)
	}
	rev2, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "run/1", []byte(`{"iteration":1}`), rev1)
	if err != nil || rev2 <= rev1 {
		t.Fatalf("UpdateKV at the current revision = %d, %v; want a revision after %d", rev2, err, rev1)
	}
	// A writer still holding rev1 loses, with the errors kv.Update gives.
	_, err = UpdateKV(ctx, b.JetStream(), RunsBucket, "run/1", []byte(`{"stale":true}`), rev1)
	if !errors.Is(err, jetstream.ErrKeyRevisionMismatch) || !errors.Is(err, jetstream.ErrKeyExists) {
		t.Fatalf("UpdateKV at a stale revision = %v, want ErrKeyRevisionMismatch and ErrKeyExists", err)
	}
	if _, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "never", []byte(`{}`), 1); !errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		t.Errorf("UpdateKV of a key never written = %v, want ErrKeyRevisionMismatch", err)
	}
	if _, err := UpdateKV(ctx, b.JetStream(), RunsBucket, "a b", []byte(`{}`), 1); !errors.Is(err, jetstream.ErrInvalidKey) {
		t.Errorf("UpdateKV of an invalid key = %v, want ErrInvalidKey", err)
	}
	e, err := kv.Get(ctx, "run/1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Revision() != rev2 || string(e.Value()) != `{"iteration":1}` {
		t.Errorf("run/1 = %s at revision %d, want the value of revision %d", e.Value(), e.Revision(), rev2)
	}
}

// RetryNoStream writes again while no stream answers (either form of the error), and returns
// any other outcome at once, or ctx's error when ctx ends.
func TestRetryNoStream(t *testing.T) {
	other := errors.New("stream full")
	for _, tc := range []struct {
		name  string
		errs  []error // what the writes return, in order
		want  error
		calls int
	}{
		{"no responders, then stored", []error{nats.ErrNoResponders, nil}, nil, 2},
		{"no stream response (KV), then stored", []error{jetstream.ErrNoStreamResponse, jetstream.ErrNoStreamResponse, nil}, nil, 3},
		{"another error: at once", []error{other}, other, 1},
		{"no responders, then another error", []error{nats.ErrNoResponders, other}, other, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			calls := 0
			err := RetryNoStream(testCtx(t), func() error {
				calls++
				return tc.errs[calls-1]
			})
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) || calls != tc.calls {
				t.Errorf("error %v after %d writes, want %v after %d", err, calls, tc.want, tc.calls)
			}
		})
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	calls := 0
	err := RetryNoStream(ctx, func() error {
		calls++
		cancel()
		return nats.ErrNoResponders
	})
	if !errors.Is(err, context.Canceled) || calls != 1 {
		t.Errorf("error %v after %d writes, want context.Canceled after 1", err, calls)
	}
}

// A publish that gets no answer within publishAttempt (a stream whose leader died drops it) is
// sent again, with the same message id, until it is answered or ctx ends. The "stream" here is
// a subscriber of a real server that drops the first two requests it gets.
func TestPublishSentAgain(t *testing.T) {
	old := publishAttempt
	publishAttempt = 20 * time.Millisecond
	t.Cleanup(func() { publishAttempt = old })
	b := open(t, Options{DataDir: t.TempDir()})
	ctx := testCtx(t)
	got := make(chan *nats.Msg, 16)
	sub, err := b.Conn().Subscribe("lossy.stream", func(m *nats.Msg) {
		got <- m
		if len(got) >= 3 { // the third request and later; the first two are dropped
			_ = m.Respond([]byte(`{"stream":"LOSSY","seq":7}`))
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	m := &nats.Msg{Subject: "lossy.stream", Data: []byte(`{}`), Header: nats.Header{jetstream.MsgIDHeader: []string{"lossy-1"}}}
	ack, err := Publish(ctx, b.Conn(), m)
	if err != nil || ack.Sequence != 7 {
		t.Fatalf("Publish to a stream that dropped two requests = %+v, %v; want the third's acknowledgement", ack, err)
	}
	if len(got) != 3 {
		t.Fatalf("the stream got %d requests, want 3", len(got))
	}
	for range 3 {
		if id := (<-got).Header.Get(jetstream.MsgIDHeader); id != "lossy-1" {
			t.Errorf("a request was sent again with message id %q, want lossy-1: the stream stores it once", id)
		}
	}

	// One that is never answered ends with the caller's context.
	silent, err := b.Conn().Subscribe("lossy.never", func(*nats.Msg) {})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = silent.Unsubscribe() }()
	short, cancel := context.WithTimeout(ctx, 10*publishAttempt)
	defer cancel()
	if _, err := Publish(short, b.Conn(), &nats.Msg{Subject: "lossy.never", Data: []byte(`{}`)}); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Publish never answered = %v, want the context's deadline", err)
	}
	// PublishWithin ends within its duration, whatever its context's deadline (an hour here:
	// without the bound, this test would wait it out), and ends with its context when that
	// comes first.
	hour, cancelHour := context.WithTimeout(context.Background(), time.Hour)
	defer cancelHour()
	if _, err := PublishWithin(hour, b.Conn(), &nats.Msg{Subject: "lossy.never", Data: []byte(`{}`)}, 3*publishAttempt); !errors.Is(err, context.DeadlineExceeded) || hour.Err() != nil {
		t.Errorf("PublishWithin never answered = %v, want its own deadline", err)
	}
	cancelled, cancelNow := context.WithCancel(ctx)
	cancelNow()
	if _, err := PublishWithin(cancelled, b.Conn(), m, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("PublishWithin under a cancelled context = %v, want context.Canceled", err)
	}
}
