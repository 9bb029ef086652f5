package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/crc32"
	"io"
	"sort"
	"strings"

	"github.com/eosink/eosink/committer"
	"github.com/eosink/eosink/staging"
)

// Problem is one thing Verify found wrong.
type Problem struct {
	Path string `json:"path"`
	What string `json:"what"`
}

// VerifyReport is the result of Verify.
type VerifyReport struct {
	Manifests int       `json:"manifests"`
	Files     int       `json:"files"`
	Bytes     int64     `json:"bytes"`
	Records   int64     `json:"records"`
	Problems  []Problem `json:"problems"`
}

// Verify reads a destination through r and reports every file no manifest
// names, every manifest entry whose file is missing or whose size, record
// count or CRC-32C differs, and manifests that cannot be read. progress,
// if not nil, is called after each file checked.
func Verify(ctx context.Context, r committer.Reader, progress func(done, total int)) (*VerifyReport, error) {
	all, err := r.List(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	rep := &VerifyReport{}
	files := map[string]committer.Entry{}
	var manifests []string
	for _, e := range all {
		switch {
		case strings.HasPrefix(e.Path, "_manifests/"):
			manifests = append(manifests, e.Path)
		case strings.HasPrefix(e.Path, "_staging/"), strings.HasPrefix(e.Path, "_nodes/"):
			// S3 copy mode's staging objects and node leases are not
			// committed data.
		default:
			files[e.Path] = e
		}
	}
	rep.Manifests = len(manifests)
	named := map[string]bool{}
	type entry struct {
		manifest string
		f        ManifestFile
	}
	var entries []entry
	for _, mp := range manifests {
		m, err := ReadManifest(ctx, r, mp)
		if err != nil {
			rep.Problems = append(rep.Problems, Problem{Path: mp, What: err.Error()})
			continue
		}
		for _, f := range m.Files {
			if named[f.Path] {
				rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: "named by more than one manifest"})
				continue
			}
			named[f.Path] = true
			entries = append(entries, entry{mp, f})
		}
	}
	for i, en := range entries {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		f := en.f
		if _, ok := files[f.Path]; !ok {
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: "missing (named by " + en.manifest + ")"})
			continue
		}
		size, lines, sum, err := scanFile(ctx, r, f.Path)
		switch {
		case err != nil:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: err.Error()})
		case size != f.Bytes:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("%d bytes, manifest says %d", size, f.Bytes)})
		case sum != f.CRC32C:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("crc32c %s, manifest says %s", sum, f.CRC32C)})
		case staging.Encoded(f.Path):
			// Compressed or Parquet: decode it and count (verify_streams.go).
			if err := checkEncoded(ctx, r, f.Path, size, f.Records); err != nil {
				rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: err.Error()})
				break
			}
			rep.Files++
			rep.Bytes += size
			rep.Records += f.Records
		case lines != f.Records:
			rep.Problems = append(rep.Problems, Problem{Path: f.Path, What: fmt.Sprintf("%d records, manifest says %d", lines, f.Records)})
		default:
			rep.Files++
			rep.Bytes += size
			rep.Records += lines
		}
		if progress != nil {
			progress(i+1, len(entries))
		}
	}
	var stray []string
	for p := range files {
		if !named[p] {
			stray = append(stray, p)
		}
	}
	sort.Strings(stray)
	for _, p := range stray {
		what := "in no manifest"
		if strings.HasSuffix(p, ".inprogress") {
			what = "temp file in the destination"
		}
		rep.Problems = append(rep.Problems, Problem{Path: p, What: what})
	}
	return rep, nil
}

// MaxManifest bounds the bytes of one manifest a reader accepts.
const MaxManifest = 1 << 30

// ReadManifest reads and checks the manifest at name (a destination path).
// A missing manifest is an error wrapping committer.ErrNotFound.
func ReadManifest(ctx context.Context, r committer.Reader, name string) (*Manifest, error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return nil, fmt.Errorf("open manifest: %w", err)
	}
	defer rc.Close()
	var m Manifest
	if err := json.NewDecoder(io.LimitReader(rc, MaxManifest)).Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest is not valid JSON: %w", err)
	}
	if want := ManifestPath(m.Node, m.Checkpoint); want != name {
		return nil, fmt.Errorf("manifest names checkpoint %d of node %q, which belongs at %s", m.Checkpoint, m.Node, want)
	}
	return &m, nil
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func scanFile(ctx context.Context, r committer.Reader, name string) (size, lines int64, sum string, err error) {
	rc, _, err := r.Open(ctx, name)
	if err != nil {
		return 0, 0, "", fmt.Errorf("open: %w", err)
	}
	defer rc.Close()
	h := crc32.New(castagnoli)
	buf := make([]byte, 256<<10)
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			size += int64(n)
			for _, b := range buf[:n] {
				if b == '\n' {
					lines++
				}
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return 0, 0, "", fmt.Errorf("read: %w", rerr)
		}
	}
	return size, lines, fmt.Sprintf("%08x", h.Sum32()), nil
}
