package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/eosink/eosink/recovery"
	"github.com/spf13/afero"
)

func verify(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("verify", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var df destFlags
	var asJSON bool
	fs.StringVar(&df.dest, "dest", "", "the destination: file:///abs/path or s3://bucket/prefix (required)")
	fs.StringVar(&df.endpoint, "s3-endpoint", "", "host:port of the S3-compatible server")
	fs.BoolVar(&df.insecure, "s3-insecure", false, "plain HTTP to --s3-endpoint")
	addS3Flags(fs, &df)
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	fs.Usage = func() {
		fmt.Fprint(stderr, "Usage: eosink verify --dest URL [flags]\n\nReads the destination and reports every file no manifest names and every\nmanifest entry whose file is missing or whose size, records or checksum\ndiffer. Exits 1 if it finds any.\n\nFlags:\n")
		fs.PrintDefaults()
	}
	if err := envFlags(fs, args); err != nil {
		return err
	}
	if df.dest == "" {
		fs.Usage()
		return fmt.Errorf("%w: --dest is required", errUsage)
	}
	dest, name, err := openDest(ctx, df, afero.NewOsFs(), "", "verify", slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	last := -1
	rep, err := recovery.Verify(ctx, dest, func(done, total int) {
		if pct := done * 10 / max(total, 1); pct != last && total >= 1000 {
			last = pct
			fmt.Fprintf(stderr, "verify: %d/%d files\n", done, total)
		}
	})
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rep); err != nil {
			return err
		}
	} else {
		for _, p := range rep.Problems {
			fmt.Fprintf(stdout, "PROBLEM %s: %s\n", p.Path, p.What)
		}
		fmt.Fprintf(stdout, "%s: %d manifests, %d files, %d records, %d bytes verified; %d problems\n",
			name, rep.Manifests, rep.Files, rep.Records, rep.Bytes, len(rep.Problems))
	}
	if len(rep.Problems) > 0 {
		return exitError(1)
	}
	return nil
}
