package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/reins-run/reins/natsbox"
)

// urlFile is the file in the data directory where `reins serve` writes the client URL of its
// embedded server, so that other commands on the same data directory connect to it.
const urlFile = "nats.url"

// natsFlags choose the NATS server of a command: an embedded one in a data directory (the
// default), or an external one with --nats.
type natsFlags struct {
	url, creds, nkey    string
	tlsCert, tlsKey, ca string
	data                string
}

func (f *natsFlags) add(cmd *cobra.Command) { f.addTo(cmd.Flags()) }

func (f *natsFlags) addTo(fl *pflag.FlagSet) { f.addNamed(fl, "data") }

// addNamed adds the flags with the data directory's flag named dataFlag (reins signal keeps
// --data for the event's data, as the CLI contract says, and names it --data-dir).
func (f *natsFlags) addNamed(fl *pflag.FlagSet, dataFlag string) {
	fl.StringVar(&f.url, "nats", "", "an external NATS `URL` (comma-separated for a cluster); default: an embedded server in --"+dataFlag)
	fl.StringVar(&f.data, dataFlag, ".reins", "the data `DIR` of the embedded server")
	fl.StringVar(&f.creds, "nats-creds", "", "a NATS user credentials `FILE` (external server)")
	fl.StringVar(&f.nkey, "nats-nkey", "", "a `FILE` holding an NKey seed (external server)")
	fl.StringVar(&f.tlsCert, "nats-tls-cert", "", "a client certificate `FILE` (external server)")
	fl.StringVar(&f.tlsKey, "nats-tls-key", "", "the client certificate's key `FILE` (external server)")
	fl.StringVar(&f.ca, "nats-tls-ca", "", "a `FILE` of CA certificates the external server's certificate must chain to")
}

// open opens the server the flags name. Embedded, with listen "" (in-process) unless given; when
// the data directory is in use by `reins serve`, it connects to that server instead, using the
// URL serve wrote; Box.Embedded says which of the two happened.
func (f *natsFlags) open(ctx context.Context, listen string, log *slog.Logger) (*natsbox.Box, error) {
	opts := natsbox.Options{
		URL: f.url, CredsFile: f.creds, NKeyFile: f.nkey, TLSCert: f.tlsCert, TLSKey: f.tlsKey, TLSCA: f.ca, Logger: log,
	}
	if f.url != "" {
		return natsbox.Open(ctx, opts)
	}
	opts.DataDir, opts.Listen = f.data, listen
	box, err := natsbox.Open(ctx, opts)
	if !errors.Is(err, natsbox.ErrDataDirLocked) {
		return box, err
	}
	data, rerr := os.ReadFile(filepath.Join(f.data, urlFile))
	url := strings.TrimSpace(string(data))
	if rerr != nil || url == "" {
		return nil, fmt.Errorf("the data directory %s is in use by another reins process that does not serve NATS: stop it, or pass --nats URL", f.data)
	}
	opts.DataDir, opts.Listen, opts.URL = "", "", url
	return natsbox.Open(ctx, opts)
}

// writeURL records the client URL of an embedded server that listens, for other commands.
func (f *natsFlags) writeURL(box *natsbox.Box) (remove func(), err error) {
	if !box.Embedded() || box.ClientURL() == "" {
		return func() {}, nil
	}
	path := filepath.Join(f.data, urlFile)
	if err := os.WriteFile(path, []byte(box.ClientURL()+"\n"), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", path, err)
	}
	return func() { _ = os.Remove(path) }, nil
}
