package enginetest

import "github.com/eosink/eosink/internal/auth"

// The bearer tokens of the api and web rigs with authorization, one per
// role (TokenRoles).
const (
	TokIngest = "ingest-token-0123456789"
	TokRead   = "read-token-0123456789"
	TokAdmin  = "admin-token-0123456789"
)

// TokenRoles maps each of the rigs' tokens to its role, for auth.NewTokens.
func TokenRoles() map[string]auth.Role {
	return map[string]auth.Role{TokIngest: auth.RoleIngest, TokRead: auth.RoleRead, TokAdmin: auth.RoleAdmin}
}
