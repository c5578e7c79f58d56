package main

import (
	"io"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/reins-run/reins/client"
	"github.com/reins-run/reins/mcpserver"
	"github.com/reins-run/reins/operator"
)

// withMCP serves m's Streamable HTTP at /mcp beside the API a (reins serve's --listen).
func withMCP(a http.Handler, m *mcpserver.Server) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/mcp", m.Handler())
	mux.Handle("/", a)
	return mux
}

func newMCPCmd() *cobra.Command {
	var nf natsFlags
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve the registered workflows as MCP tools over stdio, for a local agent host",
		Long: `Serves reins as an MCP server on standard input and output, for an agent host that starts
it as a local process (docs/mcp.md, "reins as an MCP server"): each registered workflow is a tool
of its name, whose input schema is the workflow's input_schema; a call starts a run and answers
with its output, or its failure as a tool error; a call made as an MCP task answers at once with
the run's id as the task's, which the host polls; a run and its iterations are resources
(reins://runs/ID). reins serve serves the same over Streamable HTTP at /mcp.

On a data directory (--data) it acts as the directory's admin: through the reins serve holding
the directory, or running the engine and the built-in workers itself while nobody serves it
(runs then go on only while the host keeps reins mcp running). With --server URL it carries the
host's messages to that server's /mcp as the principal of --token, which decides what it may
call. Nothing but MCP messages is written to standard output; the log goes to standard error.`,
		Example: `  reins mcp --data /var/lib/reins
  reins mcp --server http://127.0.0.1:7400 --token "$REINS_TOKEN"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			remote, err := nf.apiClient(cmd, "data")
			if err != nil {
				return err
			}
			t := &mcp.IOTransport{Reader: io.NopCloser(cmd.InOrStdin()), Writer: nopWriteCloser{cmd.OutOrStdout()}}
			if remote != nil {
				server := nf.server
				if !cmd.Flags().Changed("server") {
					server = strings.TrimSpace(os.Getenv(serverEnv))
				}
				endpoint := strings.TrimSuffix(server, "/") + "/mcp"
				if err := mcpserver.Relay(ctx, t, endpoint, nf.clientToken()); err != nil {
					return &exitError{code: exitFailed, err: err}
				}
				return nil
			}
			log := commandLogger(cmd.ErrOrStderr(), slog.LevelWarn)
			at, err := reach(ctx, &nf, "", continueConfig, log)
			if err != nil {
				return err
			}
			defer at.close()
			admin := operator.Principal{Name: operator.RoleAdmin, Roles: []string{operator.RoleAdmin}}
			s := mcpserver.New(mcpserver.Config{As: func(operator.Principal) *client.Client { return at.client }, Log: log, Version: buildVersion()})
			if err := s.Serve(ctx, admin, t); err != nil {
				return &exitError{code: exitFailed, err: err}
			}
			return nil
		},
	}
	nf.add(cmd)
	nf.addServer(cmd.Flags())
	return cmd
}

// nopWriteCloser is standard output as the transport's writer: the process closes it.
type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }
