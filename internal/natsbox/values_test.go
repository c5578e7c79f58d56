package natsbox

import (
	"bytes"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// slowLink is a TCP proxy to upstream whose server-to-client direction carries rate bytes per
// second, as a busy or distant link does.
func slowLink(t *testing.T, upstream string, rate int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); u.Close() })
			go func() { _, _ = io.Copy(u, c) }()
			go func() {
				buf := make([]byte, rate/20)
				for {
					n, err := u.Read(buf)
					if n > 0 {
						if _, werr := c.Write(buf[:n]); werr != nil {
							return
						}
						// Pacing simulates the link; nothing waits on it.
						time.Sleep(time.Duration(n) * time.Second / time.Duration(rate))
					}
					if err != nil {
						return
					}
				}
			}()
		}
	}()
	return "nats://" + ln.Addr().String()
}

// A value that takes longer to arrive than the library's API timeout is still read whole when
// the caller gives no deadline: the read is bounded by the value's size instead.
func TestGetValueSlowerThanTheAPITimeout(t *testing.T) {
	ctx := testCtx(t)
	b := open(t, Options{DataDir: t.TempDir(), Listen: "127.0.0.1:0", Authenticate: testAuth})
	ensure(t, b.JetStream())
	own, err := OpenValues(ctx, b.JetStream(), Names{})
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<17) // 2 MiB
	if err := own.PutValue(ctx, "r-1/big", big); err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(slowLink(t, b.ClientURL()[len("nats://"):], 1<<20), nats.Token(testToken))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	// An API timeout of half a second: the 2 MiB take about 2 s over the 1 MiB/s link.
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(500*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	far, err := OpenValues(ctx, js, Names{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := far.GetValue(context.Background(), "r-1/big", int64(len(big)))
	if err != nil || !bytes.Equal(got, big) {
		t.Fatalf("GetValue over a slow link: %d bytes, %v; want the %d stored", len(got), err, len(big))
	}
}

func TestReadTimeout(t *testing.T) {
	for _, tc := range []struct {
		size uint64
		want time.Duration
	}{
		{0, readBase},
		{1 << 20, readBase + time.Second},
		{64 << 20, readBase + 64*time.Second},
	} {
		if got := readTimeout(tc.size); got != tc.want {
			t.Errorf("readTimeout(%d) = %v, want %v", tc.size, got, tc.want)
		}
	}
}
