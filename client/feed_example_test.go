package client_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log"
	"os"
	"path/filepath"
	"time"

	"github.com/eosink/eosink/client"
)

// ExampleClient_Commits copies every committed record of a service into a
// folder, exactly once: each commit becomes one file named after it, and
// the feed's cursor is stored after them. A consumer killed at any point
// starts again from the cursor it stored: the commits after it are copied
// again under the same names, replacing the copies of the crashed run, so
// no record is doubled and none is missed. (With a database as the output,
// write the records and the cursor in one transaction instead.)
func ExampleClient_Commits() {
	url, stop := startService()
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Something to copy: two batches of a producer.
	p, err := client.New(url, client.WithProducer("orders-eu-1"))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Init(ctx); err != nil {
		log.Fatal(err)
	}
	for _, batch := range [][][]byte{{[]byte(`{"order":1}`), []byte(`{"order":2}`)}, {[]byte(`{"order":3}`)}} {
		if _, err := p.SendWait(ctx, "orders", batch); err != nil {
			log.Fatal(err)
		}
	}

	out, err := os.MkdirTemp("", "eosink-copy-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(out)
	c, err := client.New(url) // a reader needs no producer id; WithToken for a role "read" token
	if err != nil {
		log.Fatal(err)
	}
	if err := copyCommits(ctx, c, out, 3); err != nil {
		log.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(out, "*.ndjson"))
	records := 0
	for _, f := range files {
		b, _ := os.ReadFile(f)
		records += bytes.Count(b, []byte("\n"))
	}
	fmt.Printf("copied %d records\n", records)
	// Output:
	// copied 3 records
}

// copyCommits follows the feed from the cursor stored in dir until it has
// copied at least want records in this run.
func copyCommits(ctx context.Context, c *client.Client, dir string, want int) error {
	cursor, err := os.ReadFile(filepath.Join(dir, "cursor"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	copied := 0
	for page, err := range c.Commits(ctx, client.FeedQuery{After: string(cursor), Wait: 10 * time.Second}) {
		if err != nil {
			return err
		}
		for _, cm := range page.Commits {
			var out bytes.Buffer
			for _, f := range cm.Files {
				data, err := c.Download(ctx, f.Path, 1<<30)
				if err != nil {
					return err
				}
				out.Write(data) // plain NDJSON; a compressed stream's files need decoding
				copied += int(f.Records)
			}
			// Named after the commit: a copy made again replaces this one.
			name := fmt.Sprintf("%s-%020d.ndjson", cm.Node, cm.Checkpoint)
			if err := writeFinal(dir, name, out.Bytes()); err != nil {
				return err
			}
		}
		// Only now: what the cursor passes is on disk.
		if err := writeFinal(dir, "cursor", []byte(page.Next)); err != nil {
			return err
		}
		if copied >= want {
			return nil
		}
	}
	return ctx.Err()
}

// writeFinal writes dir/name atomically and durably: a temp file, fsync,
// rename, fsync of the folder.
func writeFinal(dir, name string, data []byte) error {
	tmp, err := os.CreateTemp(dir, name+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // gone once renamed
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, name)); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
