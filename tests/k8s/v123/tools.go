//go:build tools

// Package tools names the command tests/k8s/build.sh --v123 builds, so `go mod tidy` keeps it.
// (kube-apiserver v1.23.17 does not build from the module: its generated OpenAPI definitions
// are not in the published tree; docs/real-node.md.)
package tools

import (
	_ "k8s.io/kubernetes/cmd/kubelet"
)
