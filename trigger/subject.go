package trigger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/internal/wire"
	"github.com/reins-run/reins/workflow"
)

// Subject triggers: the operator's patterns (Config.Subjects) are captured by the stream
// natsbox.Names.TriggersStream (interest retention); each subject trigger of an active
// workflow has a durable consumer of its own on it, filtered on its subject, which every
// engine consumes (each message goes to one). A message published while no engine runs waits
// in the stream for the consumer; one that starts a run is acknowledged once the start is
// stored; one that cannot start a run is reported (logged with the reason, counted in Refused)
// and removed.

// MaxDeliveries bounds how often a message whose run could not be started is tried: then it is
// reported and removed, never retried forever.
const MaxDeliveries = 20

// retryDelay is the wait before a message whose start failed is tried again.
const retryDelay = 2 * time.Second

// consumerOf names the durable consumer of trigger t of workflow wf.
func consumerOf(wf, t string) string {
	h := sha256.Sum256([]byte(wf + "\x00" + t))
	return natsbox.TriggerConsumerPrefix + hex.EncodeToString(h[:10])
}

// subjects are the consumptions under way, by consumer name.
type subjects struct {
	mu      sync.Mutex
	running map[string]*consumption
	stream  jetstream.Stream
	refused atomic.Uint64
}

type consumption struct {
	wf, trig, subject string
	cc                jetstream.ConsumeContext
}

// Refused counts the messages of subject triggers that started no run: not a JSON object, on a
// reserved subject, or whose start kept failing. Each is logged with its reason.
func (s *Service) Refused() uint64 { return s.subs.refused.Load() }

// startSubjects creates the stream of the operator's subjects; syncSubjects then consumes.
func (s *Service) startSubjects(ctx context.Context) error {
	if len(s.cfg.Subjects) == 0 {
		return nil
	}
	if err := natsbox.EnsureTriggersStream(ctx, s.js, (*natsbox.Box)(s.cfg.Conn).Layout(), s.cfg.Subjects); err != nil {
		return err
	}
	st, err := s.js.Stream(ctx, s.names.TriggersStream())
	if err != nil {
		return fmt.Errorf("trigger: the stream of subject triggers: %w", err)
	}
	s.subs.mu.Lock()
	s.subs.stream = st
	s.subs.mu.Unlock()
	return nil
}

// stopSubjects stops every consumption (the consumers stay: messages wait for the next engine).
func (s *Service) stopSubjects() {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	for name, c := range s.subs.running {
		c.cc.Stop()
		delete(s.subs.running, name)
	}
}

// syncSubjects makes the consumers those of the subject triggers of the active workflows:
// creates (or moves to a new subject) and consumes those of active triggers, removes those of
// triggers no longer active.
func (s *Service) syncSubjects(ctx context.Context) {
	s.subs.mu.Lock()
	defer s.subs.mu.Unlock()
	if s.subs.stream == nil {
		return
	}
	want := map[string]consumption{}
	for _, a := range s.snapshot() {
		for _, t := range a.def.Triggers {
			if t.Subject != "" {
				want[consumerOf(a.reg.Name, t.Name)] = consumption{wf: a.reg.Name, trig: t.Name, subject: t.Subject}
			}
		}
	}
	for name, c := range s.subs.running {
		if w, ok := want[name]; !ok || w.subject != c.subject {
			c.cc.Stop()
			delete(s.subs.running, name)
			if !ok {
				if err := s.subs.stream.DeleteConsumer(ctx, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
					s.cfg.Log.Warn("trigger: cannot remove the consumer of a trigger no longer active", "consumer", name, "err", err)
				}
			}
		}
	}
	for name, w := range want {
		if _, ok := s.subs.running[name]; ok {
			continue
		}
		cons, err := s.subs.stream.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
			Durable: name, Description: "reins: subject trigger " + w.trig + " of workflow " + w.wf,
			FilterSubject: w.subject, AckPolicy: jetstream.AckExplicitPolicy, AckWait: 30 * time.Second,
			DeliverPolicy: jetstream.DeliverNewPolicy, MaxAckPending: 256,
		})
		if err != nil {
			s.cfg.Log.Error("trigger: cannot create the consumer of a subject trigger; trying again", "workflow", w.wf, "trigger", w.trig, "subject", w.subject, "err", err)
			continue
		}
		wf, trig := w.wf, w.trig
		cc, err := cons.Consume(func(m jetstream.Msg) { s.take(ctx, wf, trig, m) })
		if err != nil {
			s.cfg.Log.Error("trigger: cannot consume a subject trigger; trying again", "workflow", w.wf, "trigger", w.trig, "err", err)
			continue
		}
		w.cc = cc
		s.subs.running[name] = &w
	}
}

// take starts the run of message m for trigger trig of workflow wf.
func (s *Service) take(ctx context.Context, wf, trig string, m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		s.refuse(m, wf, trig, "its metadata cannot be read: "+err.Error())
		return
	}
	if workflow.ReservedSubject(m.Subject()) {
		s.refuse(m, wf, trig, "it was published on a subject of reins or of the NATS server")
		return
	}
	body := m.Data()
	if err := wire.CheckJSON(body, int(s.cfg.MaxInputBytes)); err != nil {
		s.refuse(m, wf, trig, "the message "+err.Error()+": a subject trigger's message is a JSON object, the run's input")
		return
	}
	if !strings.HasPrefix(strings.TrimLeft(string(body), " \t\r\n"), "{") {
		s.refuse(m, wf, trig, "the message is JSON but not an object: a subject trigger's message is a JSON object, the run's input")
		return
	}
	s.mu.Lock()
	a := s.active[wf]
	s.mu.Unlock()
	var t *workflow.Trigger
	if a != nil {
		for i := range a.def.Triggers {
			if a.def.Triggers[i].Name == trig && a.def.Triggers[i].Subject != "" {
				t = &a.def.Triggers[i]
			}
		}
	}
	if t == nil {
		_ = m.NakWithDelay(retryDelay) // the workflow changed: the next consumer decides
		return
	}
	// The key of the run: the publisher's message id when it set one (a message published
	// again is one run), else the message's place in the stream and its time.
	key := m.Headers().Get(jetstream.MsgIDHeader)
	if key == "" {
		key = strconv.FormatUint(md.Sequence.Stream, 10) + "@" + strconv.FormatInt(md.Timestamp.UnixNano(), 10)
	} else {
		key = "id:" + key
	}
	if _, err := s.start(ctx, a, trig, RunID("subject", wf, trig, key), json.RawMessage(body)); err != nil {
		if md.NumDelivered >= MaxDeliveries {
			s.refuse(m, wf, trig, fmt.Sprintf("its run could not be started in %d tries: %v", md.NumDelivered, err))
			return
		}
		s.cfg.Log.Warn("trigger: a message's run could not be started; trying again", "workflow", wf, "trigger", trig, "subject", m.Subject(), "err", err)
		_ = m.NakWithDelay(retryDelay)
		return
	}
	_ = m.Ack()
}

// refuse reports message m, which starts no run, and removes it.
func (s *Service) refuse(m jetstream.Msg, wf, trig, why string) {
	s.subs.refused.Add(1)
	s.cfg.Log.Warn("trigger: a message starts no run: "+why, "workflow", wf, "trigger", trig, "subject", m.Subject(), "bytes", len(m.Data()))
	_ = m.Term()
}
