package api_test

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"

	"github.com/reins-run/reins/api"
	"github.com/reins-run/reins/conn"
	"github.com/reins-run/reins/internal/natsbox"
	"github.com/reins-run/reins/operator"
)

// The API over a NATS server embedded in a data directory, with one principal: a viewer
// listing the runs (none yet). reins serve mounts it the same way, with the engine and workers
// running on the same server.
func ExampleNew() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "reins-api-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	box, err := natsbox.Open(ctx, natsbox.Options{DataDir: dir})
	if err != nil {
		log.Fatal(err)
	}
	defer box.Close()
	principals, err := (&operator.Config{}).Resolve(nil, nil)
	if err != nil {
		log.Fatal(err)
	}
	principals.AddPrincipal("vera", "vera-secret-token", operator.RoleViewer)

	srv := httptest.NewServer(api.New(api.Config{Conn: (*conn.Conn)(box), Principals: principals}))
	defer srv.Close()

	req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/v1/runs?limit=10", nil)
	req.Header.Set("Authorization", "Bearer vera-secret-token")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	fmt.Println(resp.Status)
	fmt.Print(string(body))
	// Output:
	// 200 OK
	// {
	//   "runs": []
	// }
}
