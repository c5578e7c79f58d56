package session

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
)

// ErrNotFound is returned by Get and Delete for a key the bucket does not hold.
var ErrNotFound = errors.New("no such session")

// ErrTooLarge is wrapped by the error of a save whose conversation is over MaxBytes: the step
// fails for good, naming it (a context policy bounds what a session keeps).
var ErrTooLarge = errors.New("the session's conversation is too large to keep")

// errConflict is a head write whose revision was not the head's: another save came first.
var errConflict = errors.New("the session was saved by another run meanwhile")

const (
	// ChunkSize is the most bytes one KV value of a session holds; a record over it travels
	// in chunks of its messages' JSON.
	ChunkSize = 256 << 10
	// MaxBytes bounds a session's messages (64 chunks).
	MaxBytes = 64 * ChunkSize
	// saveAttempts bounds the compare-and-sets of one save: each conflict means another run
	// saved in between, so it only runs out under that many saves at once.
	saveAttempts = 16
)

// Store is the sessions bucket ([natsbox.Names.SessionsBucket]). It is safe for concurrent use,
// and opens the bucket on first use.
type Store struct {
	js    jetstream.JetStream
	names natsbox.Names
	mu    sync.Mutex
	kv    jetstream.KeyValue
}

// New returns the sessions bucket of c's namespace, opened on first use (the layout creates it).
func New(c *conn.Conn) *Store {
	box := (*natsbox.Box)(c)
	return &Store{js: box.JetStream(), names: box.Names()}
}

// Open is New that opens the bucket now.
func Open(ctx context.Context, c *conn.Conn) (*Store, error) {
	s := New(c)
	if _, err := s.bucket(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// opened is the bucket once bucket opened it.
func (s *Store) opened() jetstream.KeyValue {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.kv
}

func (s *Store) bucket(ctx context.Context) (jetstream.KeyValue, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.kv != nil {
		return s.kv, nil
	}
	kv, err := s.js.KeyValue(ctx, s.names.SessionsBucket())
	if err != nil {
		return nil, fmt.Errorf("session: bucket %s: %w", s.names.SessionsBucket(), err)
	}
	s.kv = kv
	return kv, nil
}

// Get reads the session under key with its messages and revision, or [ErrNotFound].
func (s *Store) Get(ctx context.Context, key string) (*Session, error) {
	if !validKey(key) {
		return nil, fmt.Errorf("session %q: %w: a session key is 32 hexadecimal digits", key, ErrNotFound)
	}
	var err error
	for range 3 { // a chunk gone: a save replaced the head between the reads, read it again
		var sess *Session
		if sess, err = s.get(ctx, key); err == nil || !errors.Is(err, errChunkGone) {
			return sess, err
		}
	}
	return nil, err
}

var errChunkGone = errors.New("a chunk of the session is gone")

func (s *Store) get(ctx context.Context, key string) (*Session, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	sess, err := s.head(ctx, key)
	if err != nil || sess.Chunks == 0 {
		return sess, err
	}
	var buf bytes.Buffer
	for i := range sess.Chunks {
		e, err := kv.Get(ctx, chunkKey(key, sess.Gen, i))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, fmt.Errorf("session %s: %w", key, errChunkGone)
		}
		if err != nil {
			return nil, fmt.Errorf("session %s: read chunk %d of %d: %w", key, i, sess.Chunks, err)
		}
		buf.Write(e.Value())
	}
	sum := sha256.Sum256(buf.Bytes())
	if hex.EncodeToString(sum[:]) != sess.Digest {
		return nil, fmt.Errorf("session %s: %w", key, errChunkGone) // chunks of another generation
	}
	if err := json.Unmarshal(buf.Bytes(), &sess.Messages); err != nil {
		return nil, fmt.Errorf("session %s: its chunks are not a conversation: %w", key, err)
	}
	return sess, nil
}

// head reads and decodes the head of key (without chunks).
func (s *Store) head(ctx context.Context, key string) (*Session, error) {
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	e, err := kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("session %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", key, err)
	}
	return decodeHead(e)
}

func decodeHead(e jetstream.KeyValueEntry) (*Session, error) {
	sess := new(Session)
	if err := json.Unmarshal(e.Value(), sess); err != nil {
		return nil, fmt.Errorf("session %s: its %d bytes are not a session: %w", e.Key(), len(e.Value()), err)
	}
	sess.Revision = e.Revision()
	return sess, nil
}

// Save saves what a step's run c made of the session of scope sc, which the run began from as
// m says, at now, to expire ttl later: its whole view when the session's revision is still
// m's, else c's turn appended to the session as another run left it (a compare-and-set each
// time, read again on a conflict). A turn already saved is not saved again: saved is false.
func (s *Store) Save(ctx context.Context, sc Scope, m Mark, c *Conversation, now time.Time, ttl time.Duration) (saved bool, err error) {
	key := sc.Key()
	for range saveAttempts {
		cur, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, ErrNotFound):
			cur = nil
		case err != nil:
			return false, err
		}
		var rev uint64
		live := cur
		if cur != nil {
			rev = cur.Revision
			if cur.Expired(now) {
				live = nil
			}
		}
		var next *Session
		if rev == m.Revision {
			next = whole(sc, live, m, c)
		} else if next, saved = appended(sc, live, m, c); !saved {
			return false, nil
		}
		next.Saves++
		if next.CreatedAt.IsZero() {
			next.CreatedAt = now
		}
		next.UpdatedAt, next.ExpiresAt = now, now.Add(ttl)
		err = s.put(ctx, next, rev, cur)
		if errors.Is(err, errConflict) {
			continue
		}
		return err == nil, err
	}
	return false, fmt.Errorf("session %s: not saved: other runs saved it %d times while this one tried", key, saveAttempts)
}

// put writes next over prev (nil: none) with a compare-and-set on rev (0: the key must not
// exist): its messages in chunks first when the record is over ChunkSize, then the head; the
// chunks prev's head named are removed after.
func (s *Store) put(ctx context.Context, next *Session, rev uint64, prev *Session) error {
	kv, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	next.Count, next.Chunks, next.Gen, next.Digest = len(next.Messages), 0, "", ""
	msgs, err := json.Marshal(next.Messages)
	if err != nil {
		return fmt.Errorf("session %s: %w", next.Key, err)
	}
	head, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("session %s: %w", next.Key, err)
	}
	next.Bytes = len(head)
	var chunks []string
	if len(head) > ChunkSize {
		if len(msgs) > MaxBytes {
			return fmt.Errorf("session %s: %w: %d bytes of messages, over %d (give the step a context policy)", next.Key, ErrTooLarge, len(msgs), MaxBytes)
		}
		if chunks, err = s.putChunks(ctx, next, msgs); err != nil {
			return err
		}
		all := next.Messages
		next.Messages = nil
		head, err = json.Marshal(next)
		next.Messages = all
		if err != nil {
			return fmt.Errorf("session %s: %w", next.Key, err)
		}
	} else {
		head, _ = json.Marshal(next) // again, with Bytes
	}
	if rev == 0 {
		_, err = kv.Create(ctx, next.Key, head)
	} else {
		_, err = kv.Update(ctx, next.Key, head, rev)
	}
	if err != nil {
		s.purge(ctx, chunks)
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			return errConflict
		}
		return fmt.Errorf("session %s: save: %w", next.Key, err)
	}
	if prev != nil && prev.Chunks > 0 {
		s.purge(ctx, chunkKeys(prev.Key, prev.Gen, prev.Chunks))
	}
	return nil
}

// putChunks writes msgs in chunks of a new generation and sets next's Chunks, Gen and Digest.
func (s *Store) putChunks(ctx context.Context, next *Session, msgs []byte) ([]string, error) {
	var g [8]byte
	_, _ = rand.Read(g[:])
	next.Gen = hex.EncodeToString(g[:])
	sum := sha256.Sum256(msgs)
	next.Digest = hex.EncodeToString(sum[:])
	next.Chunks = (len(msgs) + ChunkSize - 1) / ChunkSize
	keys := chunkKeys(next.Key, next.Gen, next.Chunks)
	for i, k := range keys {
		part := msgs[i*ChunkSize : min((i+1)*ChunkSize, len(msgs))]
		if _, err := s.opened().Put(ctx, k, part); err != nil {
			s.purge(ctx, keys[:i])
			return nil, fmt.Errorf("session %s: write chunk %d of %d: %w", next.Key, i, next.Chunks, err)
		}
	}
	return keys, nil
}

// purge removes keys, as far as it can: a chunk left behind is named by no head, and goes
// with the bucket's max age.
func (s *Store) purge(ctx context.Context, keys []string) {
	for _, k := range keys {
		_ = s.opened().Purge(ctx, k)
	}
}

// Delete removes the session under key and its chunks, or returns [ErrNotFound].
func (s *Store) Delete(ctx context.Context, key string) error {
	if !validKey(key) {
		return fmt.Errorf("session %q: %w: a session key is 32 hexadecimal digits", key, ErrNotFound)
	}
	h, err := s.head(ctx, key)
	if err != nil {
		return err
	}
	if err := s.opened().Purge(ctx, key); err != nil {
		return fmt.Errorf("session %s: delete: %w", key, err)
	}
	s.purge(ctx, chunkKeys(key, h.Gen, h.Chunks))
	return nil
}

// List returns the heads of every session (without the messages of chunked ones), in no
// particular order; expired ones too ([Session.Expired] tells them).
func (s *Store) List(ctx context.Context) ([]*Session, error) {
	var out []*Session
	kv, err := s.bucket(ctx)
	if err != nil {
		return nil, err
	}
	for e, err := range natsbox.Entries(ctx, kv, "*") {
		if err != nil {
			return nil, fmt.Errorf("session: list: %w", err)
		}
		if e.Operation() != jetstream.KeyValuePut {
			continue
		}
		h, err := decodeHead(e)
		if err != nil {
			return nil, err
		}
		out = append(out, h)
	}
	return out, nil
}

// Prune removes the sessions expired at now and returns how many.
func (s *Store) Prune(ctx context.Context, now time.Time) (int, error) {
	all, err := s.List(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, h := range all {
		if !h.Expired(now) {
			continue
		}
		// Only the revision listed: a session saved since is no longer expired.
		err := s.opened().Purge(ctx, h.Key, jetstream.LastRevision(h.Revision))
		if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
			continue
		}
		if err != nil {
			return n, fmt.Errorf("session %s: prune: %w", h.Key, err)
		}
		s.purge(ctx, chunkKeys(h.Key, h.Gen, h.Chunks))
		n++
	}
	return n, nil
}

func chunkKey(key, gen string, i int) string { return key + "." + gen + "." + strconv.Itoa(i) }

func chunkKeys(key, gen string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = chunkKey(key, gen, i)
	}
	return keys
}

// validKey reports whether key is a session key (Scope.Key): 32 lowercase hex digits.
func validKey(key string) bool {
	if len(key) != 32 {
		return false
	}
	return strings.Trim(key, "0123456789abcdef") == ""
}
