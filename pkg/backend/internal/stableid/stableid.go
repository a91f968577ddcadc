// Package stableid derives identifiers that are stable across restarts from facts that are, so
// that mock and serial-less devices keep their UUIDs when the plugin restarts.
package stableid

import (
	"crypto/sha256"
	"fmt"
	"strings"
)

// UUID returns prefix + "-" + the first 16 bytes of sha256(parts joined by "/") in the
// 8-4-4-4-12 hex layout, e.g. "GPU-1f0c2a9e-4b3d-....". The same parts always give the same ID;
// the "/" separator keeps ("a/b","c") and ("a","b/c") apart only if parts carry no "/", which
// callers guarantee for node names, profile names and indices.
func UUID(prefix string, parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "/")))
	return fmt.Sprintf("%s-%x-%x-%x-%x-%x", prefix, sum[0:4], sum[4:6], sum[6:8], sum[8:10], sum[10:16])
}
