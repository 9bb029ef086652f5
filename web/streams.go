package web

import (
	"net/http"
	"strings"
	"time"

	"github.com/eosink/eosink/internal/streamconf"
	"github.com/eosink/eosink/server"
)

// StreamConfigs is the optional part of Engine that keeps stream
// configurations (*server.Engine has it); without it the page says so.
type StreamConfigs interface {
	// Streams returns every configured stream, by name.
	Streams() []server.StreamInfo
}

var _ StreamConfigs = (*server.Engine)(nil)

// streamConfRow is one configured stream on /ui/streams/config.
type streamConfRow struct {
	Name          string
	URL           string
	Format        string
	Compression   string
	Partition     string
	Schema        []string // "name type[, required]"
	RollSize      int64
	Dedup         string
	Version       int64
	ActiveVersion int64
	Pending       bool // accepted, in force from the next checkpoint barrier
	Updated       time.Time
}

type streamConfData struct {
	Rows      []streamConfRow
	Supported bool
}

// streamConfigs shows every configured stream's configuration. The
// configured streams are those an admin PUT: their number is an admin's
// choice, not traffic's.
func (u *ui) streamConfigs(w http.ResponseWriter, r *http.Request, s *session) {
	d := streamConfData{}
	if sc, ok := u.eng.(StreamConfigs); ok {
		d.Supported = true
		for _, in := range sc.Streams() {
			d.Rows = append(d.Rows, streamConfRowOf(in))
		}
	}
	u.render(w, r, http.StatusOK, "streamconfig.html", &view{Title: "Stream configurations", Nav: "overview", Sess: s, Data: d})
}

func streamConfRowOf(in server.StreamInfo) streamConfRow {
	c := in.Config
	row := streamConfRow{Name: in.Stream, URL: browseURL(in.Stream, true), Format: c.Format, Compression: c.Compression,
		Partition: c.Partition, RollSize: c.RollSize, Dedup: c.Dedup, Version: c.Version, ActiveVersion: in.ActiveVersion,
		Pending: in.ActiveVersion != c.Version, Updated: in.UpdatedAt}
	if row.Format == streamconf.FormatAuto {
		row.Format = "from Content-Type"
	}
	if c.Schema != nil {
		for _, f := range c.Schema.Fields {
			s := f.Name + " " + string(f.Type)
			if f.Required {
				s += ", required"
			}
			row.Schema = append(row.Schema, s)
		}
	}
	return row
}

// schemaText joins a row's schema fields for the table.
func (r streamConfRow) SchemaText() string { return strings.Join(r.Schema, "; ") }
