package web

import (
	"net/http"
	"strings"
	"testing"
)

// TestStreamConfigPage: the UI shows each configured stream's
// configuration, in force once its PUT answered, and a Parquet file's first
// rows as a table.
func TestStreamConfigPage(t *testing.T) {
	r := newRig(t, rigOpts{})
	body := `{"format":"parquet","partition":"region={field:region}","schema":{"fields":[{"name":"id","type":"int64","required":true},{"name":"region","type":"string","required":true}]}}`
	if rec := r.apiDo("PUT", "/v1/streams/orders", body, "Content-Type", "application/json"); rec.Code != http.StatusOK {
		t.Fatalf("PUT: %d %s", rec.Code, rec.Body.String())
	}
	page := r.page(t, "/ui/streams/config")
	expectContains(t, page, `data-name="orders"`, "parquet", "region={field:region}", "id int64, required; region string, required")
	if strings.Contains(page, "(next checkpoint)") {
		t.Fatal("pending after the PUT answered: a PUT is in force when it answers")
	}
	r.write("orders", `{"id":1,"region":"eu"}`+"\n"+`{"id":2,"region":"eu"}`+"\n")
	c := r.checkpoint()
	if len(c.Files) != 1 || !strings.HasSuffix(c.Files[0].Path, ".parquet") {
		t.Fatalf("files %+v", c.Files)
	}
	page = r.page(t, "/ui/files/"+c.Files[0].Path)
	expectContains(t, page, `id="preview-table"`, "<th scope=\"col\">id</th>", "<td>eu</td>", "first 2 rows")
}
