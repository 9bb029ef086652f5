package api

import (
	"slices"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
)

// TestErrorCodes: the const block is the OpenAPI document's enum of error
// codes, each once, in its order.
func TestErrorCodes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(openAPI)
	if err != nil {
		t.Fatal(err)
	}
	var enum []string
	for _, v := range doc.Components.Schemas["Error"].Value.Properties["error"].Value.Enum {
		enum = append(enum, v.(string))
	}
	if !slices.Equal(enum, ErrorCodes) {
		t.Fatalf("error codes:\n openapi.yaml %v\n codes.go     %v", enum, ErrorCodes)
	}
	seen := map[string]bool{}
	for _, c := range ErrorCodes {
		if seen[c] {
			t.Errorf("code %s listed twice", c)
		}
		seen[c] = true
	}
}
