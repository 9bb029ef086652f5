// Package auth owns who may do what, for the API and the web UI alike: the
// roles, the token file (LoadTokens), the constant-time lookup, and the
// Gate that both ask, which limits the invalid tokens one client address
// may send (so a guesser gains nothing by switching from one to the
// other). How a request carries its token is each front's own: the API
// reads the Authorization header (and the cookie for GET), the UI its
// login cookie (CookieName).
package auth
