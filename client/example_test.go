package client_test

import (
	"context"
	"fmt"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/eosink/eosink/api"
	"github.com/eosink/eosink/client"
	"github.com/eosink/eosink/committer/local"
	"github.com/eosink/eosink/server"
	"github.com/spf13/afero"
)

// Example sends one batch of three records to a real eosink service
// running in this process, and waits until it is committed.
func Example() {
	url, stop := startService()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(url, client.WithProducer("orders-eu-1"))
	if err != nil {
		log.Fatal(err)
	}
	// A new epoch: any older instance of orders-eu-1 is fenced.
	if _, err := c.Init(ctx); err != nil {
		log.Fatal(err)
	}
	res, err := c.Send(ctx, "orders", [][]byte{
		[]byte(`{"order":1,"total":9.5}`),
		[]byte(`{"order":2,"total":12}`),
		[]byte(`{"order":3,"total":3.25}`),
	})
	if err != nil {
		log.Fatal(err)
	}
	// Accepted, not yet committed: wait for the service's next checkpoint.
	if err := c.Flush(ctx); err != nil {
		log.Fatal(err)
	}
	st, err := c.State(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("committed %d records\n", res.Records)
	fmt.Printf("stream orders: next_seq %d, committed_seq %d\n",
		st.Streams["orders"].NextSeq, st.Streams["orders"].CommittedSeq)
	// Output:
	// committed 3 records
	// stream orders: next_seq 1, committed_seq 0
}

// startService runs an engine over an in-memory filesystem, with its
// state store in a temp dir and a checkpoint every 50ms, behind the HTTP
// API on a loopback port.
func startService() (url string, stop func()) {
	dir, err := os.MkdirTemp("", "eosink-example-")
	if err != nil {
		log.Fatal(err)
	}
	fs := afero.NewMemMapFs()
	dest := local.New(fs, "/data/files", "/data/staging")
	eng, err := server.Open(server.Config{
		Node: "example", FS: fs, StagingDir: "/data/staging", StorePath: filepath.Join(dir, "state.db"),
		Committer: dest, Publisher: dest, CheckpointInterval: 50 * time.Millisecond,
	})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := api.New(api.Config{Engine: eng, Files: dest})
	if err != nil {
		log.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	return ts.URL, func() {
		ts.Close()
		_ = eng.Close()
		_ = os.RemoveAll(dir)
	}
}
