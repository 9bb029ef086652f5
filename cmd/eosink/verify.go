package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"time"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/internal/catalog"
	"github.com/eosink/eosink/internal/layout"
	"github.com/spf13/afero"
)

func verify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("verify", "Usage: eosink verify --dest URL [flags]\n\nReads the destination and reports every file no manifest names and every\nmanifest entry whose file is missing or whose size, records or checksum\ndiffer. Exits 1 if it finds any.\n\nWith --dry-run it also lists the S3 uploads and staging objects that the\norphan sweep of a node (or of every node) would remove, and removes nothing.", stderr)
	var df destFlags
	var asJSON, dryRun bool
	var node string
	fs.StringVar(&df.dest, "dest", "", "the destination: file:///abs/path or s3://bucket/prefix (required)")
	fs.StringVar(&df.endpoint, "s3-endpoint", "", "host:port of the S3-compatible server")
	fs.BoolVar(&df.insecure, "s3-insecure", false, "plain HTTP to --s3-endpoint")
	addS3Flags(fs, &df)
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.BoolVar(&dryRun, "dry-run", false, "also report what the orphan sweep would remove (S3 uploads and staging objects); removes nothing")
	fs.StringVar(&node, "node", "", "with --dry-run: only this node's leftovers (default: every node found)")
	if err := envFlags(fs, args); err != nil {
		return usageError(err)
	}
	if df.dest == "" {
		fs.Usage()
		return fmt.Errorf("%w: --dest is required", errUsage)
	}
	dest, name, err := openDest(ctx, df, afero.NewOsFs(), "", "verify", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	cat, err := catalog.New(catalog.Config{Files: dest})
	if err != nil {
		return err
	}
	last := -1
	rep, err := cat.Verify(ctx, func(done, total int) {
		if pct := done * 10 / max(total, 1); pct != last && total >= 1000 {
			last = pct
			fmt.Fprintf(stderr, "verify: %d/%d files\n", done, total)
		}
	})
	if err != nil {
		return err
	}
	var orphans map[string][]committer.Leftover
	if dryRun {
		if orphans, err = leftovers(ctx, dest, node); err != nil {
			return err
		}
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		var doc any = rep
		if dryRun {
			doc = struct {
				*catalog.VerifyReport
				Orphans map[string][]committer.Leftover `json:"orphans"`
			}{rep, orphans}
		}
		if err := enc.Encode(doc); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "PROBLEM %s: %s\n", p.Path, p.What)
		}
		tables := ""
		if rep.Tables > 0 {
			tables = fmt.Sprintf(", %d Iceberg tables (%d data files) checked against them", rep.Tables, rep.TableFiles)
		}
		fmt.Fprintf(stdout, "%s: %d manifests, %d files, %d records, %d bytes verified%s; %d problems\n",
			name, rep.Manifests, rep.Files, rep.Records, rep.Bytes, tables, len(rep.Problems))
		if len(rep.Quarantined) > 0 {
			fmt.Fprintf(stdout, "%d files set aside under %s/ by recovery (a checkpoint whose state store was lost before its manifest; their batches were resent): not a problem, kept for you to look at\n",
				len(rep.Quarantined), layout.QuarantineDir)
		}
		if dryRun {
			printLeftovers(stdout, orphans, node)
		}
	}
	if len(rep.Problems) > 0 {
		return exitError(1)
	}
	return nil
}

// leftoverLister is a committer that can list every node's leftovers (S3).
type leftoverLister interface {
	LeftoversOf(ctx context.Context, node string) (map[string][]committer.Leftover, error)
}

// leftovers lists what the orphan sweep of node ("" for every node) could
// remove. A destination without remote leftovers (local) has none.
func leftovers(ctx context.Context, dest destination, node string) (map[string][]committer.Leftover, error) {
	l, ok := dest.(leftoverLister)
	if !ok {
		return map[string][]committer.Leftover{}, nil
	}
	out, err := l.LeftoversOf(ctx, node)
	if err != nil {
		return nil, fmt.Errorf("dry run: %w", err)
	}
	return out, nil
}

func printLeftovers(w io.Writer, byNode map[string][]committer.Leftover, node string) {
	nodes := make([]string, 0, len(byNode))
	total := 0
	for n, l := range byNode {
		nodes = append(nodes, n)
		total += len(l)
	}
	sort.Strings(nodes)
	for _, n := range nodes {
		for _, l := range byNode[n] {
			age := time.Since(l.Initiated).Round(time.Second)
			if l.Kind == committer.LeftoverUpload {
				fmt.Fprintf(w, "ORPHAN node %s: upload %s of %s, started %s ago\n", n, l.UploadID, l.Key, age)
			} else {
				fmt.Fprintf(w, "ORPHAN node %s: staging object %s, written %s ago\n", n, l.Key, age)
			}
		}
	}
	who := "every node's"
	if node != "" {
		who = "node " + node + "'s"
	}
	fmt.Fprintf(w, "dry run: %d uploads and staging objects found that %s orphan sweep would remove, unless a prepared or in-flight checkpoint of a running node names them; nothing was removed\n", total, who)
}
