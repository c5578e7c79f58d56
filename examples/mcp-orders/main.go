// Command mcp-orders is a small MCP server over stdio for the examples: it serves read_order and
// read_delivery_status over a fixed set of orders, so that `reins agent --mcp` has real tools to
// call with no network and no database.
//
//	reins agent --model replay:examples/cassettes/refund-openai.json \
//	  --goal "Decide whether refund evidence is sufficient for order O-104." \
//	  --mcp "go run ./examples/mcp-orders"
package main

import (
	"context"
	"fmt"
	"log"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type orderIn struct {
	OrderID string `json:"order_id" jsonschema:"the order id, such as O-104"`
}

type order struct {
	OrderID  string  `json:"order_id"`
	Status   string  `json:"status"`
	Amount   float64 `json:"amount"`
	LateDays int     `json:"late_days"`
}

type delivery struct {
	OrderID   string `json:"order_id"`
	Carrier   string `json:"carrier"`
	Promised  string `json:"promised"`
	Delivered string `json:"delivered"`
}

var orders = map[string]order{
	"O-104": {OrderID: "O-104", Status: "delivered", Amount: 42.50, LateDays: 4},
	"O-105": {OrderID: "O-105", Status: "in_transit", Amount: 18.00},
}

var deliveries = map[string]delivery{
	"O-104": {OrderID: "O-104", Carrier: "acme", Promised: "2026-11-10", Delivered: "2026-11-14"},
}

func main() {
	server := mcp.NewServer(&mcp.Implementation{Name: "mcp-orders", Version: "1.0.0"}, nil)
	mcp.AddTool(server, &mcp.Tool{
		Name:        "read_order",
		Description: "Read an order by id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, order, error) {
		o, ok := orders[in.OrderID]
		if !ok {
			return nil, order{}, fmt.Errorf("no order %q", in.OrderID)
		}
		return nil, o, nil
	})
	mcp.AddTool(server, &mcp.Tool{
		Name:        "read_delivery_status",
		Description: "Read the carrier's delivery record of an order.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, func(_ context.Context, _ *mcp.CallToolRequest, in orderIn) (*mcp.CallToolResult, delivery, error) {
		d, ok := deliveries[in.OrderID]
		if !ok {
			return nil, delivery{}, fmt.Errorf("no delivery record for %q", in.OrderID)
		}
		return nil, d, nil
	})
	if err := server.Run(context.Background(), &mcp.StdioTransport{}); err != nil {
		log.Fatal(err)
	}
}
